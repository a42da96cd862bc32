package wire

import "testing"

func TestOrderToolResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		api  API
		body string
		want string // "" = the body itself, unchanged
	}{
		{"chat in order", APIChat,
			`{"messages":[{"role":"assistant","tool_calls":[{"id":"a"},{"id":"b"}]},{"role":"tool","tool_call_id":"a","content":"1"},{"role":"tool","tool_call_id":"b","content":"2"}]}`, ""},
		{"chat out of order", APIChat,
			`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a"},{"id":"b"},{"id":"c"}]}, {"role":"tool","tool_call_id":"c","content":"3"}, {"role":"tool","tool_call_id":"a","content":"1"},{"role":"tool","tool_call_id":"b","content":"2"},{"role":"user","content":"y"}],"tools":[]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a"},{"id":"b"},{"id":"c"}]}, {"role":"tool","tool_call_id":"a","content":"1"}, {"role":"tool","tool_call_id":"b","content":"2"},{"role":"tool","tool_call_id":"c","content":"3"},{"role":"user","content":"y"}],"tools":[]}`},
		{"chat unknown call stays", APIChat,
			`{"messages":[{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"tool","tool_call_id":"z","content":"1"},{"role":"tool","tool_call_id":"a","content":"2"}]}`, ""},
		{"responses out of order", APIResponses,
			`{"input":[{"type":"function_call","call_id":"a"},{"type":"function_call","call_id":"b"},{"type":"function_call_output","call_id":"b","output":"2"},{"type":"function_call_output","call_id":"a","output":"1"}]}`,
			`{"input":[{"type":"function_call","call_id":"a"},{"type":"function_call","call_id":"b"},{"type":"function_call_output","call_id":"a","output":"1"},{"type":"function_call_output","call_id":"b","output":"2"}]}`},
		{"responses interleaved in order", APIResponses,
			`{"input":[{"type":"function_call","call_id":"a"},{"type":"function_call_output","call_id":"a","output":"1"},{"type":"function_call","call_id":"b"},{"type":"function_call_output","call_id":"b","output":"2"}]}`, ""},
		{"anthropic out of order", APIMessages,
			`{"messages":[{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"a"},{"type":"tool_use","id":"b"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"2"},{"type":"tool_result","tool_use_id":"a","content":"1"},{"type":"text","text":"go on"}]}]}`,
			`{"messages":[{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"a"},{"type":"tool_use","id":"b"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"1"},{"type":"tool_result","tool_use_id":"b","content":"2"},{"type":"text","text":"go on"}]}]}`},
		{"anthropic in order", APIMessages,
			`{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a"},{"type":"tool_use","id":"b"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"b"}]}]}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			got, moved := OrderToolResults(tc.api, body)
			if string(body) != tc.body {
				t.Fatalf("input body was modified: %s", body)
			}
			if tc.want == "" {
				if moved || &got[0] != &body[0] || len(got) != len(body) {
					t.Errorf("got a new body %s, want the same slice", got)
				}
				return
			}
			if !moved || string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestResultsOutOfOrder(t *testing.T) {
	t.Parallel()
	r := Request{LastAssistantToolCallIDs: []string{"a", "b", "c"},
		ToolResults: []ToolResult{{CallID: "a"}, {CallID: "c"}, {CallID: "b"}}}
	if !r.ResultsOutOfOrder() {
		t.Error("a, c, b answering a, b, c: not reported out of order")
	}
	r.ToolResults = []ToolResult{{CallID: "a"}, {CallID: "x"}, {CallID: "c"}}
	if r.ResultsOutOfOrder() {
		t.Error("a, x, c answering a, b, c: reported out of order")
	}
}
