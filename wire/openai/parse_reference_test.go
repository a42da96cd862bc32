package openai

import (
	"bytes"
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
	"github.com/haltline/haltline/wire/wiretest"
)

// parseResponseByLevels is the chat completion reader ParseResponse
// replaced, kept as the reference it must agree with: it validates the
// body, then reads each level's members again from its parent's raw value.
func parseResponseByLevels(body []byte) (wire.Response, error) {
	choiceKeys := [2]string{"message", "finish_reason"}
	messageKeys := [3]string{"content", "tool_calls", "function_call"}
	var r wire.Response
	var choices string
	ok := eachValidMember(body, func(key, v string) {
		switch key {
		case "id":
			r.ID = clone(str(v))
		case "model":
			r.Model = clone(str(v))
		case "usage":
			r.Usage, r.HasUsage = usageFrom(v)
		case "choices":
			choices = v
		case "error":
			if isObject(v) {
				r.ErrorMessage = clone(str(field(v, "message")))
				r.FinishReason = "error"
			}
		}
	})
	if !ok {
		return wire.Response{}, errNotObject
	}
	var first string
	eachElement(choices, func(c string) bool {
		first = c
		return false
	})
	if first == "" {
		return r, nil
	}
	var choice [2]string // message, finish_reason
	fields(first, choiceKeys[:], choice[:])
	if fr := chatFinish(choice[1]); fr != "" {
		r.FinishReason = fr
	}
	var msg [3]string // content, tool_calls, function_call
	fields(choice[0], messageKeys[:], msg[:])
	text, _ := appendParts(nil, msg[0], "text", "output_text")
	r.TextHash = wire.TextHash(view(text))
	r.Text = head(text)
	eachElement(msg[1], func(tc string) bool {
		r.ToolCalls = append(r.ToolCalls, toolCallFrom(tc))
		return true
	})
	if fc := msg[2]; isObject(fc) { // legacy, no id
		r.ToolCalls = append(r.ToolCalls, callOf("", fc))
	}
	return r, nil
}

// eachValidMember walks body, which must be exactly one JSON object, in the
// pass that validates it: fn gets each member's raw key and value. It
// reports false for a body that is not one valid object (fn may have seen
// members of it by then).
func eachValidMember(body []byte, fn func(key, val string)) bool {
	s := view(body)
	end := jsonscan.Object(s, skipWS(s, 0), true, func(key string, _, v int) int {
		end := jsonscan.ValidValue(s, v)
		if end >= 0 {
			fn(key, s[v:end])
		}
		return end
	})
	return end >= 0 && skipWS(s, end) == len(s)
}

// TestParseResponseMatchesByLevels compares ParseResponse with the reader
// it replaced on the fixtures and on bodies whose shapes the single pass
// must treat as the levels did: duplicate keys at each level, elements and
// members of unexpected types, legacy function calls, content parts.
func TestParseResponseMatchesByLevels(t *testing.T) {
	bodies := []string{
		`{"choices":[{"message":{"content":"a"}}],"choices":[{"message":{"content":"b"},"finish_reason":"stop"}]}`,
		`{"choices":[{"message":{"content":"a"}}],"choices":7}`,
		`{"choices":[]}`,
		`{"choices":[1,{"message":{"content":"x"}}]}`,
		`{"choices":[{"message":"no","message":{"content":"x"}}]}`,
		`{"choices":[{"message":{"content":"x"},"message":{"content":"y"},"finish_reason":"length","finish_reason":"stop"}]}`,
		`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"q\":1}"}},7,{"function":"x"},{"id":"b","id":"c","function":{"name":"g","name":"h"}}],"tool_calls":[{"id":"z"}]}}]}`,
		`{"choices":[{"message":{"tool_calls":{"id":"a"},"tool_calls":[{"id":"b"}]}}]}`,
		`{"choices":[{"message":{"function_call":{"name":"f","arguments":"{}"},"function_call":{"name":"g"}}}]}`,
		`{"choices":[{"message":{"function_call":"x","content":[{"type":"text","text":"p1"},{"type":"output_text","text":"p2"},{"type":"image_url"}],"content":"later"}}]}`,
		`{"error":{"message":"boom"},"choices":[{"finish_reason":"stop"}]}`,
		`{"id":"a\u00e9","model":"m","usage":{"prompt_tokens":3,"completion_tokens":4},"choices":[{"message":{"content":"\u2028\n"}}]}`,
		` { "choices" : [ { "message" : { "tool_calls" : [ { "id" : "a" , "function" : { "name" : "f" } } ] } } ] } `,
		`{"choices":[{"message":{"content":"x"}}]`,
		`{"choices":[{"message":{"content":"x"}},]}`,
		`{"choices":[{"message":{"tool_calls":[{"id":"a"},]}}]}`,
		`[]`,
		``,
	}
	for _, name := range []string{"chat/response-parallel-tool-calls.json", "chat/response-usage-cache-hit.json", "chat/response-usage-cache-write.json", "chat/response-usage-reasoning.json", "chat/error-429-rate-limit-tokens.json"} {
		bodies = append(bodies, string(fixture(t, name)))
	}
	for _, b := range bodies {
		wiretest.SameAsReference(t, []byte(b), Chat{}.ParseResponse, parseResponseByLevels)
	}
}

func FuzzParseResponseMatchesByLevels(f *testing.F) {
	seedFiles(f, ".json")
	f.Add([]byte(`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		wiretest.SameAsReference(t, bytes.Clone(body), Chat{}.ParseResponse, parseResponseByLevels)
	})
}
