package contextmgr

import (
	"encoding/json"
	"fmt"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/gjson"
)

// validate checks what a provider checks about a request's history: tool
// results follow the model turn that asked for them, every call has its
// result, Anthropic roles alternate starting with user. It reads the body
// with encoding/json so that it does not share the code under test.
func validate(api wire.API, body []byte) error {
	if !json.Valid(body) {
		return fmt.Errorf("not JSON")
	}
	switch api {
	case wire.APIChat:
		var req struct {
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		open := map[string]bool{}
		for i, m := range req.Messages {
			if m.Role != "tool" && len(open) > 0 {
				return fmt.Errorf("message %d (%s): calls without results: %v", i, m.Role, open)
			}
			switch m.Role {
			case "assistant":
				for _, tc := range m.ToolCalls {
					open[tc.ID] = true
				}
			case "tool":
				if !open[m.ToolCallID] {
					return fmt.Errorf("message %d: tool result %q does not follow its call", i, m.ToolCallID)
				}
				delete(open, m.ToolCallID)
			}
		}
		if len(open) > 0 {
			return fmt.Errorf("calls without results at the end: %v", open)
		}
	case wire.APIResponses:
		var req struct {
			PreviousResponseID string `json:"previous_response_id"`
			Input              []struct {
				Type   string `json:"type"`
				Role   string `json:"role"`
				CallID string `json:"call_id"`
			} `json:"input"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		calls, outs := map[string]int{}, map[string]int{}
		for i, it := range req.Input {
			switch it.Type {
			case "function_call":
				calls[it.CallID] = i
			case "function_call_output":
				j, ok := calls[it.CallID]
				if (!ok && req.PreviousResponseID == "") || j > i {
					return fmt.Errorf("item %d: output %q without an earlier call", i, it.CallID)
				}
				outs[it.CallID] = i
			}
		}
		for id := range calls {
			if _, ok := outs[id]; !ok {
				return fmt.Errorf("call %q without output", id)
			}
		}
	case wire.APIMessages:
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return err
		}
		var pending map[string]bool
		for i, m := range req.Messages {
			want := "user"
			if i%2 == 1 {
				want = "assistant"
			}
			if m.Role != want {
				return fmt.Errorf("message %d: role %s, want %s (alternation)", i, m.Role, want)
			}
			results := map[string]bool{}
			uses := map[string]bool{}
			gjson.ParseBytes(m.Content).ForEach(func(_, b gjson.Result) bool {
				switch b.Get("type").String() {
				case "tool_use":
					uses[b.Get("id").String()] = true
				case "tool_result":
					results[b.Get("tool_use_id").String()] = true
				}
				return true
			})
			for id := range results {
				if !pending[id] {
					return fmt.Errorf("message %d: tool_result %q does not answer the previous message", i, id)
				}
			}
			for id := range pending {
				if !results[id] {
					return fmt.Errorf("message %d: tool_use %q has no result", i, id)
				}
			}
			pending = uses
		}
	}
	return nil
}
