package anthropic

import (
	"encoding/json"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/wire"
)

// OfferTool adds a client tool to a Messages request.
func (Messages) OfferTool(body []byte, name, description, schema string) ([]byte, error) {
	for _, n := range gjson.GetBytes(body, "tools.#.name").Array() {
		if n.String() == name {
			return body, nil
		}
	}
	return sjson.SetBytes(body, "tools.-1", map[string]any{"name": name, "description": description,
		"input_schema": json.RawMessage(schema)})
}

// AppendToolRound appends the assistant message with its text and
// tool_use blocks, then a user message of their tool_result blocks.
func (Messages) AppendToolRound(body []byte, text string, calls []wire.ToolCall, results []string) ([]byte, error) {
	blocks := make([]any, 0, len(calls)+1)
	if text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": text})
	}
	out := make([]any, len(calls))
	for i, c := range calls {
		input := json.RawMessage(c.Arguments)
		if !json.Valid(input) {
			input = json.RawMessage(`{}`)
		}
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": input})
		out[i] = map[string]any{"type": "tool_result", "tool_use_id": c.ID, "content": results[i]}
	}
	body, err := sjson.SetBytes(body, "messages.-1", map[string]any{"role": "assistant", "content": blocks})
	if err != nil {
		return nil, err
	}
	return sjson.SetBytes(body, "messages.-1", map[string]any{"role": "user", "content": out})
}
