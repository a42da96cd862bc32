package mcp

import (
	"encoding/json"
	"fmt"
)

// Tool is one entry of a tools/list answer, as far as governance reads it.
type Tool struct {
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Annotations map[string]any  `json:"annotations,omitempty"`
}

// Hints returns the boolean annotations (readOnlyHint, destructiveHint,
// idempotentHint, openWorldHint). They are hints for policy, never
// overrides: a server describes its own tools.
func (t *Tool) Hints() map[string]bool {
	var h map[string]bool
	for k, v := range t.Annotations {
		if b, ok := v.(bool); ok {
			if h == nil {
				h = map[string]bool{}
			}
			h[k] = b
		}
	}
	return h
}

// ParseToolsList reads the tools of a tools/list result.
func ParseToolsList(result json.RawMessage) ([]Tool, error) {
	var r struct {
		Tools []Tool `json:"tools"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, fmt.Errorf("mcp: tools/list result: %s", shortErr(err))
	}
	return r.Tools, nil
}

// AppendTool adds a tool definition (a JSON object) to a tools/list
// result, keeping every other field of the result as it was.
func AppendTool(result json.RawMessage, tool []byte) ([]byte, error) {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, fmt.Errorf("mcp: tools/list result: %s", shortErr(err))
	}
	var tools []json.RawMessage
	if raw, ok := r["tools"]; ok {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, fmt.Errorf("mcp: tools/list tools: %s", shortErr(err))
		}
	}
	tools = append(tools, tool)
	r["tools"], _ = json.Marshal(tools)
	return json.Marshal(r)
}
