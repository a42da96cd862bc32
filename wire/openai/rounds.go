package openai

import (
	"encoding/json"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/wire"
)

// OfferTool adds a function tool to a Chat Completions request.
func (Chat) OfferTool(body []byte, name, description, schema string) ([]byte, error) {
	return offerTool(body, "tools.#.function.name", name,
		map[string]any{"type": "function", "function": map[string]any{"name": name, "description": description, "parameters": json.RawMessage(schema)}})
}

// OfferTool adds a function tool to a Responses request.
func (Responses) OfferTool(body []byte, name, description, schema string) ([]byte, error) {
	return offerTool(body, "tools.#.name", name,
		map[string]any{"type": "function", "name": name, "description": description, "parameters": json.RawMessage(schema)})
}

// offerTool appends def to body's tools unless a name at path is name.
func offerTool(body []byte, path, name string, def any) ([]byte, error) {
	for _, n := range gjson.GetBytes(body, path).Array() {
		if n.String() == name {
			return body, nil
		}
	}
	return sjson.SetBytes(body, "tools.-1", def)
}

// AppendToolRound appends the assistant message with its tool_calls and
// one tool message a result.
func (Chat) AppendToolRound(body []byte, text string, calls []wire.ToolCall, results []string) ([]byte, error) {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	tc := make([]call, len(calls))
	for i, c := range calls {
		tc[i] = call{ID: c.ID, Type: "function", Function: fn{Name: c.Name, Arguments: string(c.Arguments)}}
	}
	var content any
	if text != "" {
		content = text
	}
	a := appender{body: body}
	a.add("messages.-1", map[string]any{"role": "assistant", "content": content, "tool_calls": tc})
	for i, c := range calls {
		a.add("messages.-1", map[string]any{"role": "tool", "tool_call_id": c.ID, "content": results[i]})
	}
	return a.body, a.err
}

// AppendToolRound appends the assistant's text, its function_call items
// and their function_call_output items to the input (a string input
// becomes a user message first).
func (Responses) AppendToolRound(body []byte, text string, calls []wire.ToolCall, results []string) ([]byte, error) {
	a := appender{body: body}
	if in := gjson.GetBytes(body, "input"); in.Type == gjson.String {
		a.add("input", []any{map[string]any{"role": "user", "content": in.String()}})
	}
	if text != "" {
		a.add("input.-1", map[string]any{"role": "assistant", "content": text})
	}
	for _, c := range calls {
		a.add("input.-1", map[string]any{"type": "function_call", "call_id": c.ID, "name": c.Name, "arguments": string(c.Arguments)})
	}
	for i, c := range calls {
		a.add("input.-1", map[string]any{"type": "function_call_output", "call_id": c.ID, "output": results[i]})
	}
	return a.body, a.err
}

// appender sets values in a body one after another, to the first error.
type appender struct {
	body []byte
	err  error
}

func (a *appender) add(path string, v any) {
	if a.err == nil {
		a.body, a.err = sjson.SetBytes(a.body, path, v)
	}
}
