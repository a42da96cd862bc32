package openai

import "encoding/json"

// BuildRequest implements wire.RequestBuilder for chat completions.
func (Chat) BuildRequest(model, system, user string, maxOutput int64) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
		"max_completion_tokens": maxOutput,
	})
	return b
}

// BuildRequest implements wire.RequestBuilder for the Responses API.
func (Responses) BuildRequest(model, system, user string, maxOutput int64) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model, "instructions": system, "input": user,
		"max_output_tokens": maxOutput, "store": false,
	})
	return b
}
