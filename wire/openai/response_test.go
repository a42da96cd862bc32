package openai

import (
	"math/rand/v2"
	"testing"

	"github.com/haltline/haltline/wire"
)

type wantResp struct {
	id     string
	usage  wire.Usage
	finish string
	text   string
	calls  []wire.ToolCall
}

func checkResp(t *testing.T, got *wire.Response, want wantResp) {
	t.Helper()
	if !got.HasUsage || got.Usage != want.usage {
		t.Errorf("usage = %+v (has %v), want %+v", got.Usage, got.HasUsage, want.usage)
	}
	if want.id != "" && got.ID != want.id {
		t.Errorf("id = %q, want %q", got.ID, want.id)
	}
	if got.FinishReason != want.finish {
		t.Errorf("finish = %q, want %q", got.FinishReason, want.finish)
	}
	if got.Text != want.text {
		t.Errorf("text = %q, want %q", got.Text, want.text)
	}
	if got.TextHash != wire.TextHash(want.text) {
		t.Errorf("text hash = %x, want %x", got.TextHash, wire.TextHash(want.text))
	}
	if len(got.ToolCalls) != len(want.calls) {
		t.Fatalf("tool calls = %d %+v, want %d", len(got.ToolCalls), got.ToolCalls, len(want.calls))
	}
	for i, c := range want.calls {
		g := got.ToolCalls[i]
		if g.ID != c.ID || g.Name != c.Name || string(g.Arguments) != string(c.Arguments) {
			t.Errorf("call %d = {%s %s %s}, want {%s %s %s}", i, g.ID, g.Name, g.Arguments, c.ID, c.Name, c.Arguments)
		}
	}
}

func call(id, name, args string) wire.ToolCall {
	return wire.ToolCall{ID: id, Name: name, Arguments: []byte(args)}
}

// fixtureResponses lists every fixture with usage, with its exact numbers.
var fixtureResponses = []struct {
	desc  string
	codec wire.Codec
	file  string
	want  wantResp
}{
	{
		desc: "chat reasoning", codec: Chat{}, file: "chat/response-usage-reasoning.json",
		want: wantResp{
			id:     "chatcmpl-CJYvbsw8VZh862zGsIV5ZJtMnVFej",
			usage:  wire.Usage{InputTokens: 27, OutputTokens: 267, ReasoningTokens: 192},
			finish: "stop",
			text:   "Ball costs 5 cents.\n\nReason: Let ball = x dollars. Then bat = x + 1. Total: x + (x + 1) = 1.10 → 2x + 1 = 1.10 → 2x = 0.10 → x = 0.05.",
		},
	},
	{
		desc: "chat cache write", codec: Chat{}, file: "chat/response-usage-cache-write.json",
		want: wantResp{usage: wire.Usage{InputTokens: 4020, OutputTokens: 4, CacheWriteTokens: 4012}, finish: "stop", text: "OK"},
	},
	{
		desc: "chat cache hit", codec: Chat{}, file: "chat/response-usage-cache-hit.json",
		want: wantResp{usage: wire.Usage{InputTokens: 4020, OutputTokens: 4, CachedTokens: 4012}, finish: "stop", text: "OK"},
	},
	{
		desc: "chat parallel tool calls", codec: Chat{}, file: "chat/response-parallel-tool-calls.json",
		want: wantResp{
			usage: wire.Usage{InputTokens: 71, OutputTokens: 46}, finish: "tool_calls",
			calls: []wire.ToolCall{
				call("call_jYdIdRZHxZTn5bWCq5jlMrJi", "delete_file", `{"path": ".env"}`),
				call("call_TmlTVWQbzrXCZ4jNsCVNbNqu", "create_file", `{"path": "test.txt"}`),
			},
		},
	},
	{
		desc: "chat stream text", codec: Chat{}, file: "chat/stream-text-include-usage.sse",
		want: wantResp{
			id:    "chatcmpl-CMKB4CzjM9AbvNcftqEsFcWBSrZNT",
			usage: wire.Usage{InputTokens: 14, OutputTokens: 8}, finish: "stop",
			text: "The capital of Mexico is Mexico City.",
		},
	},
	{
		desc: "chat stream parallel tool calls", codec: Chat{}, file: "chat/stream-parallel-tool-calls.sse",
		want: wantResp{
			usage: wire.Usage{InputTokens: 417, OutputTokens: 44}, finish: "tool_calls",
			calls: []wire.ToolCall{
				call("call_NS4iQj14cDFwc0BnrKqDHavt", "get_weather", `{"city": "Mexico City"}`),
				call("call_SkGkkGDvHQEEk0CGbnAh2AQw", "get_product_name", `{}`),
			},
		},
	},
	{
		desc: "chat stream parallel tool calls 2024", codec: Chat{}, file: "chat/stream-parallel-tool-calls-2024.sse",
		want: wantResp{
			usage: wire.Usage{InputTokens: 149, OutputTokens: 60}, finish: "tool_calls",
			calls: []wire.ToolCall{
				call("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs", `{"city": "Edinburgh", "country": "GB", "units": "c"}`),
				call("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price", `{"ticker": "AAPL", "exchange": "NASDAQ"}`),
			},
		},
	},
	{
		desc: "responses function call reasoning", codec: Responses{}, file: "responses/response-function-call-reasoning.json",
		want: wantResp{
			id:    "resp_094ebefab06f6c100069efd5814cd881958cfa10878ca4446d",
			usage: wire.Usage{InputTokens: 63, OutputTokens: 72, ReasoningTokens: 29}, finish: "tool_calls",
			text:  `I'll check the capital lookup tool for "PotatoLand."`,
			calls: []wire.ToolCall{call("call_ALAJMWK9buNN7RXxxXbECcHa", "get_capital", `{"country":"PotatoLand"}`)},
		},
	},
	{
		desc: "responses cache hit", codec: Responses{}, file: "responses/response-usage-cache-hit.json",
		want: wantResp{usage: wire.Usage{InputTokens: 4020, OutputTokens: 5, CachedTokens: 4012}, finish: "stop", text: "OK"},
	},
	{
		desc: "responses stream function call", codec: Responses{}, file: "responses/stream-function-call.sse",
		want: wantResp{
			id:    "resp_0fabc13af1ee0049006a691dfdab8881a1a75f2db7ff78cb83",
			usage: wire.Usage{InputTokens: 63, OutputTokens: 69, ReasoningTokens: 26}, finish: "tool_calls",
			text:  "I’ll check the capital lookup tool for “PotatoLand.”",
			calls: []wire.ToolCall{call("call_LabG58Uhrq9kZvR52BYKjToD", "get_capital", `{"country":"PotatoLand"}`)},
		},
	},
	{
		desc: "responses stream function call 2025-03", codec: Responses{}, file: "responses/stream-function-call-2025-03.sse",
		want: wantResp{
			id:    "resp_67e554a155508191900ee113293c4c830794405d35281ae2",
			usage: wire.Usage{InputTokens: 255, OutputTokens: 16}, finish: "tool_calls",
			calls: []wire.ToolCall{call("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", `{"country":"France"}`)},
		},
	},
}

func isStream(file string) bool { return len(file) > 4 && file[len(file)-4:] == ".sse" }

func TestFixtureResponses(t *testing.T) {
	t.Parallel()
	for _, tc := range fixtureResponses {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := fixture(t, tc.file)
			if !isStream(tc.file) {
				got, err := tc.codec.ParseResponse(body)
				if err != nil {
					t.Fatal(err)
				}
				checkResp(t, &got, tc.want)
				return
			}
			// Whole, then cut at random (arguments and events split
			// anywhere), both with and without the strip.
			r := rand.New(rand.NewPCG(1, uint64(len(body))))
			for i := range 50 {
				for _, includeUsage := range []bool{false, true} {
					req := &wire.Request{Stream: true, IncludeUsage: includeUsage}
					tap := tc.codec.NewStreamTap(req)
					var cuts []int
					if i > 0 {
						cuts = randomCuts(r, len(body), 1+r.IntN(300))
					}
					feedCuts(tap, body, cuts)
					checkResp(t, tap.Response(), tc.want)
				}
			}
		})
	}
}

func TestParseResponseRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		body string
	}{
		{"empty", ""},
		{"array", "[]"},
		{"truncated", `{"id":"x","choices":[`},
		{"string", `"x"`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			for _, c := range []wire.Codec{Chat{}, Responses{}} {
				if _, err := c.ParseResponse([]byte(tc.body)); err == nil {
					t.Errorf("%v: no error", c.API())
				}
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		codec  wire.Codec
		stream string
		want   string
	}{
		{
			"chat error chunk", Chat{},
			"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
				"data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n",
			"The server had an error",
		},
		{
			"responses error event", Responses{},
			"event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"Boom\",\"sequence_number\":3}\n\n",
			"Boom",
		},
		{
			"responses failed", Responses{},
			"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"Failed hard\"},\"output\":[],\"usage\":null}}\n\n",
			"Failed hard",
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tap := tc.codec.NewStreamTap(&wire.Request{Stream: true})
			out := feedCuts(tap, []byte(tc.stream), []int{7, 40})
			if string(out) != tc.stream {
				t.Errorf("output changed:\n%q", out)
			}
			r := tap.Response()
			if r.ErrorMessage != tc.want || r.FinishReason != "error" {
				t.Errorf("error = %q finish %q, want %q error", r.ErrorMessage, r.FinishReason, tc.want)
			}
		})
	}
}
