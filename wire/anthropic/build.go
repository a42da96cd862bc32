package anthropic

import "encoding/json"

// BuildRequest implements wire.RequestBuilder for the Messages API.
func (Messages) BuildRequest(model, system, user string, maxOutput int64) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model, "max_tokens": maxOutput, "system": system,
		"messages": []map[string]string{{"role": "user", "content": user}},
	})
	return b
}
