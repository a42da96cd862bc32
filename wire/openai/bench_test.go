package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
)

// chatRequest builds an agent's chat request: a system prompt, tools, and
// turns of assistant tool calls answered by tool outputs of outLen bytes
// (JSON-ish text full of quotes and newlines, as real tool output is).
func chatRequest(turns, outLen int) []byte {
	msgs := []any{
		map[string]any{"role": "system", "content": "You are a careful agent. Use the tools."},
		map[string]any{"role": "user", "content": "Find the orders of customer 42 and summarise them."},
	}
	line := `{"order": "A-1001", "status": "shipped", "note": "left at \"door\""}` + "\n"
	out := strings.Repeat(line, outLen/len(line)+1)[:outLen]
	for i := range turns {
		id := fmt.Sprintf("call_%024d", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": id, "type": "function",
				"function": map[string]any{"name": "search_orders", "arguments": `{"customer": 42, "page": ` + fmt.Sprint(i) + `}`},
			}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": out},
		)
	}
	body, _ := json.Marshal(map[string]any{
		"model": "gpt-4o", "stream": true, "messages": msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "search_orders", "parameters": map[string]any{"type": "object"},
		}}},
	})
	return body
}

func BenchmarkParseRequest(b *testing.B) {
	for _, tc := range []struct {
		desc        string
		turns, size int
	}{
		{"2KB", 3, 400},
		{"200KB", 60, 3300},
	} {
		body := chatRequest(tc.turns, tc.size)
		b.Run(fmt.Sprintf("%s/%dB", tc.desc, len(body)), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := (Chat{}).ParseRequest(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPrepareUpstream(b *testing.B) {
	body := chatRequest(60, 3300)
	req, _ := Chat{}.ParseRequest(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_, _ = Chat{}.PrepareUpstream(body, &req, 1000)
	}
}

// BenchmarkTapFeed measures one Feed per SSE event (one op = one chunk),
// a new tap per stream as in production.
func BenchmarkTapFeed(b *testing.B) {
	for _, tc := range []struct {
		desc  string
		codec wire.Codec
		file  string
		req   wire.Request
	}{
		{"chat/text/strip", Chat{}, "chat/stream-text-include-usage.sse", wire.Request{Stream: true}},
		{"chat/text/pass", Chat{}, "chat/stream-text-include-usage.sse", wire.Request{Stream: true, IncludeUsage: true}},
		{"chat/tools/strip", Chat{}, "chat/stream-parallel-tool-calls.sse", wire.Request{Stream: true}},
		{"responses/function-call", Responses{}, "responses/stream-function-call.sse", wire.Request{Stream: true}},
	} {
		evs := eventsOf(fixture(b, tc.file))
		b.Run(tc.desc, func(b *testing.B) {
			b.ReportAllocs()
			var tap wire.StreamTap
			i := 0
			for b.Loop() {
				if i%len(evs) == 0 {
					tap = tc.codec.NewStreamTap(&tc.req)
				}
				tap.Feed(evs[i%len(evs)])
				i++
			}
		})
	}
}

// BenchmarkValidReference is the floor ParseRequest builds on: one
// validating pass of gjson over the same 200 KB body.
func BenchmarkValidReference(b *testing.B) {
	body := chatRequest(60, 3300)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		_ = gjson.ValidBytes(body)
	}
}

// BenchmarkParseResponse is the settlement's read of a chat completion: a
// tool call (the common answer of an agent step) and a final text answer.
func BenchmarkParseResponse(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"tool-call", `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"search_orders","arguments":"{\"page\":3}"}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":18,"total_tokens":918,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":"fp_1"}`},
		{"text", `{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"The three open orders of customer 4711 are A-1001, A-1002 and A-1007; all shipped.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (Chat{}).ParseResponse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
