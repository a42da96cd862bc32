package wire

import "github.com/tidwall/gjson"

// ToolNames returns the names of the tools the request offers: a function
// tool's name (chat function.name, Responses and Anthropic name); a hosted
// tool without a name (a Responses web_search, computer_use_preview …) is
// named by its type, so that policy can still give it a level.
func (r *Request) ToolNames() []string {
	if r.Tools == "" {
		return nil
	}
	var names []string
	gjson.Parse(r.Tools).ForEach(func(_, t gjson.Result) bool {
		name := t.Get("name").Str
		if name == "" {
			name = t.Get("function.name").Str
		}
		if name == "" {
			name = t.Get("type").Str
		}
		if name != "" {
			names = append(names, name)
		}
		return true
	})
	return names
}
