package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/runstate"
)

// spUsage is a run record's token counters, normalised per docs/design.md §12.
type spUsage struct{ In, Out, Cached, Reasoning, CacheWrite int64 }

func spRecordUsage(rec runstate.Record) spUsage {
	return spUsage{rec.InputTokens, rec.OutputTokens, rec.CachedTokens, rec.ReasoningTokens, rec.CacheWriteTokens}
}

// spCall is a tool call as the client saw it.
type spCall struct{ ID, Name, Args string }

func spSameCalls(t *testing.T, got, want []spCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("tool calls %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Name != want[i].Name || !spJSONEqual(got[i].Args, want[i].Args) {
			t.Fatalf("tool call %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func spJSONEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// 1. Every recorded fixture reaches the official SDK intact through the
// gateway, its usage lands in the run record normalised per docs/design.md §12, and
// the run headers are on the answer.
func TestSpineFixturesThroughSDKs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	userMsg := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Delete the file `.env` and create `test.txt`")}
	antMsg := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Who is the youngest?"))}
	respInput := responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the capital of PotatoLand?")}
	antCalls := func(m *anthropic.Message) (calls []spCall, text string) {
		for _, c := range m.Content {
			switch c.Type {
			case "tool_use":
				calls = append(calls, spCall{c.ID, c.Name, string(c.Input)})
			case "text":
				text += c.Text
			}
		}
		return calls, text
	}
	for _, tc := range []struct {
		desc    string
		fixture string
		usage   spUsage
		final   bool // the answer is final (no tool calls): the run completes
		// call makes the SDK call, checks the answer and returns its headers.
		call func(t *testing.T, g *app.Gateway) http.Header
	}{
		{
			desc: "openai chat parallel tool calls", fixture: "openai-chat/response-parallel-tool-calls.json",
			usage: spUsage{In: 71, Out: 46},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				c, err := spOpenAI(g).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: userMsg},
					option.WithResponseInto(&resp))
				if err != nil {
					t.Fatal(err)
				}
				if c.ID != "chatcmpl-C9f7f1SbHRzcwlJwrYKdSonTRWPvV" || len(c.Choices) != 1 || c.Choices[0].FinishReason != "tool_calls" {
					t.Fatalf("completion %+v", c)
				}
				var got []spCall
				for _, tc := range c.Choices[0].Message.ToolCalls {
					got = append(got, spCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
				}
				spSameCalls(t, got, []spCall{
					{"call_jYdIdRZHxZTn5bWCq5jlMrJi", "delete_file", `{"path": ".env"}`},
					{"call_TmlTVWQbzrXCZ4jNsCVNbNqu", "create_file", `{"path": "test.txt"}`},
				})
				if c.Usage.PromptTokens != 71 || c.Usage.CompletionTokens != 46 {
					t.Fatalf("client usage %+v", c.Usage)
				}
				return resp.Header
			},
		},
		{
			desc: "openai chat stream parallel tool calls", fixture: "openai-chat/stream-parallel-tool-calls.sse",
			usage: spUsage{In: 417, Out: 44},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				s := spOpenAI(g).Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: userMsg},
					option.WithResponseInto(&resp))
				acc := openai.ChatCompletionAccumulator{}
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" {
					t.Fatalf("accumulated %+v", acc.ChatCompletion)
				}
				var got []spCall
				for _, tc := range acc.Choices[0].Message.ToolCalls {
					got = append(got, spCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
				}
				spSameCalls(t, got, []spCall{
					{"call_NS4iQj14cDFwc0BnrKqDHavt", "get_weather", `{"city": "Mexico City"}`},
					{"call_SkGkkGDvHQEEk0CGbnAh2AQw", "get_product_name", `{}`},
				})
				// The client did not ask for usage: the chunk the gateway
				// asked for on its behalf is removed again.
				if acc.Usage.TotalTokens != 0 {
					t.Fatalf("client got a usage chunk it did not ask for: %+v", acc.Usage)
				}
				return resp.Header
			},
		},
		{
			desc: "openai chat stream text include_usage", fixture: "openai-chat/stream-text-include-usage.sse",
			usage: spUsage{In: 14, Out: 8}, final: true,
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				s := spOpenAI(g).Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o",
					Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the capital of Mexico?")},
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}},
					option.WithResponseInto(&resp))
				acc := openai.ChatCompletionAccumulator{}
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "stop" ||
					acc.Choices[0].Message.Content != "The capital of Mexico is Mexico City." {
					t.Fatalf("accumulated %+v", acc.ChatCompletion)
				}
				if acc.Usage.PromptTokens != 14 || acc.Usage.CompletionTokens != 8 {
					t.Fatalf("client asked for usage and got %+v", acc.Usage)
				}
				return resp.Header
			},
		},
		{
			desc: "openai responses function call with reasoning", fixture: "openai-responses/response-function-call-reasoning.json",
			usage: spUsage{In: 63, Out: 72, Reasoning: 29},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				r, err := spOpenAI(g).Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5.5", Input: respInput},
					option.WithResponseInto(&resp))
				if err != nil {
					t.Fatal(err)
				}
				if r.ID != "resp_094ebefab06f6c100069efd5814cd881958cfa10878ca4446d" || len(r.Output) != 3 {
					t.Fatalf("response %s with %d output items", r.ID, len(r.Output))
				}
				var got []spCall
				for _, o := range r.Output {
					if o.Type == "function_call" {
						got = append(got, spCall{o.CallID, o.Name, o.Arguments.OfString})
					}
				}
				spSameCalls(t, got, []spCall{{"call_ALAJMWK9buNN7RXxxXbECcHa", "get_capital", `{"country":"PotatoLand"}`}})
				if r.Output[0].Type != "reasoning" || r.Output[0].EncryptedContent == "" || r.OutputText() != `I'll check the capital lookup tool for "PotatoLand."` {
					t.Fatalf("reasoning or text lost: %q %q", r.Output[0].Type, r.OutputText())
				}
				if r.Usage.OutputTokensDetails.ReasoningTokens != 29 {
					t.Fatalf("client usage %+v", r.Usage)
				}
				return resp.Header
			},
		},
		{
			desc: "openai responses stream function call", fixture: "openai-responses/stream-function-call.sse",
			usage: spUsage{In: 63, Out: 69, Reasoning: 26},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				s := spOpenAI(g).Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-5.5", Input: respInput},
					option.WithResponseInto(&resp))
				var args, text string
				var final responses.Response
				events := 0
				for s.Next() {
					ev := s.Current()
					if ev.SequenceNumber != int64(events) {
						t.Fatalf("event %d has sequence number %d", events, ev.SequenceNumber)
					}
					events++
					switch ev.Type {
					case "response.function_call_arguments.delta":
						args += ev.Delta
					case "response.output_text.delta":
						text += ev.Delta
					case "response.completed":
						final = ev.Response
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if events != 33 || text != "I’ll check the capital lookup tool for “PotatoLand.”" || args != `{"country":"PotatoLand"}` {
					t.Fatalf("%d events, text %q, args %q", events, text, args)
				}
				var got []spCall
				for _, o := range final.Output {
					if o.Type == "function_call" {
						got = append(got, spCall{o.CallID, o.Name, o.Arguments.OfString})
					}
				}
				spSameCalls(t, got, []spCall{{"call_LabG58Uhrq9kZvR52BYKjToD", "get_capital", `{"country":"PotatoLand"}`}})
				if final.Usage.OutputTokens != 69 {
					t.Fatalf("client usage %+v", final.Usage)
				}
				return resp.Header
			},
		},
		{
			// input = 7 + 0 cache reads + 1069 cache writes (docs/design.md §12).
			desc: "anthropic tool use with cache write", fixture: "anthropic/response-tool-use-cache-write.json",
			usage: spUsage{In: 7 + 1069, Out: 60, CacheWrite: 1069},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				m, err := spAnthropic(g).Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024, Messages: antMsg},
					aoption.WithResponseInto(&resp))
				if err != nil {
					t.Fatal(err)
				}
				calls, _ := antCalls(m)
				spSameCalls(t, calls, []spCall{{"toolu_01JA8S35SNy1ruX8gAXgb3Y6", "lookup_refund_policy", `{"order_id":"order-123"}`}})
				if m.StopReason != anthropic.StopReasonToolUse || m.Usage.CacheCreationInputTokens != 1069 || m.Usage.InputTokens != 7 {
					t.Fatalf("message %s stop %q usage %+v", m.ID, m.StopReason, m.Usage)
				}
				return resp.Header
			},
		},
		{
			desc: "anthropic parallel tool use", fixture: "anthropic/response-parallel-tool-use.json",
			usage: spUsage{In: 423, Out: 202},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				m, err := spAnthropic(g).Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-haiku-4-5", MaxTokens: 1024, Messages: antMsg},
					aoption.WithResponseInto(&resp))
				if err != nil {
					t.Fatal(err)
				}
				calls, text := antCalls(m)
				spSameCalls(t, calls, []spCall{
					{"toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", `{"name":"Alice"}`},
					{"toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", `{"name":"Bob"}`},
					{"toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", `{"name":"Charlie"}`},
					{"toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", `{"name":"Daisy"}`},
				})
				if !strings.HasPrefix(text, "I'll help you find out who is the youngest") {
					t.Fatalf("text %q", text)
				}
				return resp.Header
			},
		},
		{
			desc: "anthropic stream tool use", fixture: "anthropic/stream-tool-use.sse",
			usage: spUsage{In: 377, Out: 65},
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				s := spAnthropic(g).Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-0", MaxTokens: 1024, Messages: antMsg},
					aoption.WithResponseInto(&resp))
				var m anthropic.Message
				for s.Next() {
					if err := m.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				calls, text := antCalls(&m)
				spSameCalls(t, calls, []spCall{{"toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", `{"location": "Paris"}`}})
				if text != "I'll check the current weather in Paris for you." || m.StopReason != anthropic.StopReasonToolUse ||
					m.Usage.InputTokens != 377 || m.Usage.OutputTokens != 65 {
					t.Fatalf("text %q stop %q usage %+v", text, m.StopReason, m.Usage)
				}
				return resp.Header
			},
		},
		{
			// message_delta repeats input_tokens: it must not be counted twice.
			desc: "anthropic stream padded text", fixture: "anthropic/stream-text-padded.sse",
			usage: spUsage{In: 20, Out: 5}, final: true,
			call: func(t *testing.T, g *app.Gateway) http.Header {
				var resp *http.Response
				s := spAnthropic(g).Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024, Messages: antMsg},
					aoption.WithResponseInto(&resp))
				var m anthropic.Message
				for s.Next() {
					if err := m.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if _, text := antCalls(&m); text != "2" || m.StopReason != anthropic.StopReasonEndTurn || m.ID != "msg_018E1hg8GoVTGEKQY3ovMcSJ" {
					t.Fatalf("message %s text %q stop %q", m.ID, text, m.StopReason)
				}
				return resp.Header
			},
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, spServeFixture(t, tc.fixture))
			g := startGateway(t, up.URL)
			h := tc.call(t, g)
			runID := spCheckRunHeaders(t, h, "1")
			rec := settledRecord(t, g, runID)
			if got := spRecordUsage(rec); got != tc.usage {
				t.Errorf("record tokens %+v, want %+v", got, tc.usage)
			}
			if rec.ModelCalls != 1 || rec.AgentSteps != 1 {
				t.Errorf("record model_calls %d agent_steps %d, want 1 and 1", rec.ModelCalls, rec.AgentSteps)
			}
			want := runstate.ExecutingTools
			if tc.final {
				want = runstate.Completed
			}
			if rec.Status != want {
				t.Errorf("record status %q, want %q", rec.Status, want)
			}
			if n := len(up.requests()); n != 1 {
				t.Errorf("upstream saw %d calls, want 1", n)
			}
		})
	}
}

// 2. A chat stream whose client did not ask for usage is sent upstream with
// stream_options.include_usage injected, and the client receives the
// upstream's bytes minus exactly the usage-only event. A client that asked
// for usage gets every byte, and its request goes upstream unchanged.
func TestSpineIncludeUsageInjectStrip(t *testing.T) {
	t.Parallel()
	stream := fixture(t, "openai-chat/stream-text-include-usage.sse")
	var stripped, usageEvents int
	var want []byte
	for _, ev := range spEvents(stream) {
		if strings.Contains(ev, `"choices":[],"usage":{`) {
			usageEvents++
			continue
		}
		stripped += len(ev)
		want = append(want, ev...)
	}
	if usageEvents != 1 {
		t.Fatalf("fixture has %d usage-only events, want 1", usageEvents)
	}
	for _, tc := range []struct {
		desc string
		body []byte
		// want is what the client must receive.
		want []byte
		// unchanged: the upstream must receive the client's exact bytes.
		unchanged bool
	}{
		{"client did not ask", spChatBody(true, ""), want, false},
		{"client did not ask, stream_options without include_usage", spChatBody(true, `,"stream_options":{}`), want, false},
		{"client asked", spChatBody(true, `,"stream_options":{"include_usage":true}`), stream, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) { writeSSE(w, stream) })
			g := startGateway(t, up.URL)
			resp, got := spPost(t, g, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-agent-test"}, tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			reqs := up.requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d calls", len(reqs))
			}
			var sent struct {
				StreamOptions struct {
					IncludeUsage *bool `json:"include_usage"`
				} `json:"stream_options"`
			}
			if err := json.Unmarshal(reqs[0].Body, &sent); err != nil {
				t.Fatalf("upstream body: %v: %s", err, reqs[0].Body)
			}
			if sent.StreamOptions.IncludeUsage == nil || !*sent.StreamOptions.IncludeUsage {
				t.Fatalf("upstream was not asked for usage: %s", reqs[0].Body)
			}
			if tc.unchanged && !bytes.Equal(reqs[0].Body, tc.body) {
				t.Errorf("upstream body changed although the client asked for usage itself:\n got %s\nwant %s", reqs[0].Body, tc.body)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("client bytes (%d) differ from the expected (%d):\n got %q\nwant %q", len(got), len(tc.want), got, tc.want)
			}
			rec := settledRecord(t, g, spCheckRunHeaders(t, resp.Header, "1"))
			if rec.InputTokens != 14 || rec.OutputTokens != 8 || rec.Status != runstate.Completed {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// 3. Lineage: the calls of one task are one run, without any header.
func TestSpineLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("responses previous_response_id continues the run", func(t *testing.T) {
		t.Parallel()
		first := fixture(t, "openai-responses/response-function-call-reasoning.json")
		final := []byte(`{"id":"resp_spine_final","object":"response","created_at":1777325450,"status":"completed","model":"gpt-5.5-2026-04-23",` +
			`"output":[{"id":"msg_spine_final","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"The capital of PotatoLand is Spudville.","annotations":[],"logprobs":[]}]}],` +
			`"previous_response_id":"resp_094ebefab06f6c100069efd5814cd881958cfa10878ca4446d",` +
			`"usage":{"input_tokens":150,"input_tokens_details":{"cached_tokens":0},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":162}}`)
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
			if bytes.Contains(body, []byte(`"previous_response_id"`)) {
				writeJSON(w, 200, final)
				return
			}
			writeJSON(w, 200, first)
		})
		g := startGateway(t, up.URL)
		client := openaiClient(g)
		var h1, h2 *http.Response
		r1, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5.5",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the capital of PotatoLand?")}},
			option.WithResponseInto(&h1))
		if err != nil {
			t.Fatal(err)
		}
		callID := ""
		for _, o := range r1.Output {
			if o.Type == "function_call" {
				callID = o.CallID
			}
		}
		r2, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5.5",
			PreviousResponseID: openai.String(r1.ID),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{{
				OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{CallID: openai.String(callID),
					Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("Spudville")}}}}}},
			option.WithResponseInto(&h2))
		if err != nil {
			t.Fatal(err)
		}
		if r2.OutputText() != "The capital of PotatoLand is Spudville." {
			t.Fatalf("second answer %q", r2.OutputText())
		}
		id1, id2 := spCheckRunHeaders(t, h1.Header, "1"), spCheckRunHeaders(t, h2.Header, "2")
		if id1 != id2 {
			t.Fatalf("previous_response_id started a new run: %s then %s", id1, id2)
		}
		rec := runRecord(t, g, id1)
		if rec.ModelCalls != 2 || rec.AgentSteps != 2 || rec.Status != runstate.Completed ||
			rec.InputTokens != 63+150 || rec.OutputTokens != 72+12 {
			t.Fatalf("record %+v", rec)
		}
	})

	// A final answer followed by a new user message in the same history
	// is a new task: a new run in the same session.
	for _, tc := range []struct {
		desc      string
		anthropic bool
	}{{"new user message after final answer starts a new run, openai", false}, {"new user message after final answer starts a new run, anthropic", true}} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{in: 100, out: 10}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			var ids [2]string
			if tc.anthropic {
				client := anthropicClient(g)
				msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("First question."))}
				for i := range ids {
					var resp *http.Response
					a, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-haiku-4-5", MaxTokens: 256, Messages: msgs},
						aoption.WithResponseInto(&resp))
					if err != nil {
						t.Fatal(err)
					}
					ids[i] = spCheckRunHeaders(t, resp.Header, "1")
					msgs = append(msgs, a.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("Second question.")))
				}
			} else {
				client := openaiClient(g)
				msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("First question.")}
				for i := range ids {
					var resp *http.Response
					c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs},
						option.WithResponseInto(&resp))
					if err != nil {
						t.Fatal(err)
					}
					ids[i] = spCheckRunHeaders(t, resp.Header, "1")
					msgs = append(msgs, c.Choices[0].Message.ToParam(), openai.UserMessage("Second question."))
				}
			}
			if ids[0] == ids[1] {
				t.Fatalf("a new user message after a final answer continued run %s", ids[0])
			}
			r1, r2 := runRecord(t, g, ids[0]), runRecord(t, g, ids[1])
			if r1.SessionID == "" || r1.SessionID != r2.SessionID {
				t.Fatalf("sessions %q and %q, want one", r1.SessionID, r2.SessionID)
			}
			if r1.Status != runstate.Completed || r2.Status != runstate.Completed || r1.ModelCalls != 1 || r2.ModelCalls != 1 {
				t.Fatalf("records %+v\n%+v", r1, r2)
			}
		})
	}

	t.Run("explicit X-Run-Id groups unrelated calls", func(t *testing.T) {
		t.Parallel()
		m := &toolLoop{in: 100, out: 10}
		up := newUpstream(t, m.serve)
		g := startGateway(t, up.URL)
		client := openaiClient(g)
		call := func(q string, opts ...option.RequestOption) string {
			var resp *http.Response
			_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(q)}}, append(opts, option.WithResponseInto(&resp))...)
			if err != nil {
				t.Fatal(err)
			}
			return spCheckRunHeaders(t, resp.Header, "")
		}
		hdr := option.WithHeader("X-Run-Id", "run-spine-explicit")
		if a, b := call("Question A.", hdr), call("Question B.", hdr); a != "run-spine-explicit" || b != "run-spine-explicit" {
			t.Fatalf("X-Run-Id run-spine-explicit answered as %s and %s", a, b)
		}
		if rec := runRecord(t, g, "run-spine-explicit"); rec.ModelCalls != 2 {
			t.Fatalf("record %+v", rec)
		}
		// Without the header the same two calls are two runs.
		if a, b := call("Question A."), call("Question B."); a == b {
			t.Fatalf("two unrelated calls without X-Run-Id share run %s", a)
		}
	})

	t.Run("session, agent and task type headers land in the record", func(t *testing.T) {
		t.Parallel()
		m := &toolLoop{in: 100, out: 10}
		up := newUpstream(t, m.serve)
		g := startGateway(t, up.URL)
		var resp *http.Response
		_, err := spOpenAI(g).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello.")}},
			option.WithHeader("X-Session-Id", "sess-spine-42"), option.WithHeader("X-Agent-Id", "planner"),
			option.WithHeader("X-Task-Type", "research"), option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		rec := runRecord(t, g, spCheckRunHeaders(t, resp.Header, "1"))
		if rec.SessionID != "sess-spine-42" || rec.AgentID != "planner" || rec.TaskType != "research" {
			t.Fatalf("identity %+v", rec.Identity)
		}
		// The run headers are the gateway's: none goes upstream.
		for k := range up.requests()[0].Header {
			if k == "X-Session-Id" || k == "X-Agent-Id" || k == "X-Task-Type" {
				t.Errorf("run header %s forwarded upstream", k)
			}
		}
	})
}

// 4. Keys: a virtual key names the principal and is never forwarded; without
// gateway keys the agent's own key passes and names the tenant by its hash.
func TestSpineKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	virtual := func(c *config.Config) {
		c.VirtualKeys = map[string]config.Principal{"sk-red-1": {Tenant: "acme", Team: "red"}}
		c.Providers.OpenAI.APIKey = "sk-upstream"
		c.Providers.Anthropic.APIKey = "sk-ant-upstream"
	}
	for _, tc := range []struct {
		desc      string
		mod       func(*config.Config)
		anthropic bool
		key       string
		status    int
		// upstream headers wanted (when the call passes)
		wantHeader map[string]string
		tenant     string // "" checks the key-<hash> form
		team       string
	}{
		{desc: "virtual key, openai", mod: virtual, key: "sk-red-1", status: 200,
			wantHeader: map[string]string{"Authorization": "Bearer sk-upstream"}, tenant: "acme", team: "red"},
		{desc: "virtual key, anthropic", mod: virtual, anthropic: true, key: "sk-red-1", status: 200,
			wantHeader: map[string]string{"X-Api-Key": "sk-ant-upstream", "Authorization": ""}, tenant: "acme", team: "red"},
		{desc: "unknown key, openai", mod: virtual, key: "sk-blue-9", status: 401},
		{desc: "unknown key, anthropic", mod: virtual, anthropic: true, key: "sk-blue-9", status: 401},
		{desc: "own key passes through, openai", key: "sk-agent-own", status: 200,
			wantHeader: map[string]string{"Authorization": "Bearer sk-agent-own"}},
		// anthropic-sdk-go v2 sends its key as Authorization: Bearer.
		{desc: "own key passes through, anthropic", anthropic: true, key: "sk-ant-agent-own", status: 200,
			wantHeader: map[string]string{"Authorization": "Bearer sk-ant-agent-own"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{in: 100, out: 10}
			up := newUpstream(t, m.serve)
			var mods []func(*config.Config)
			if tc.mod != nil {
				mods = append(mods, tc.mod)
			}
			g := startGateway(t, up.URL, mods...)
			var resp *http.Response
			var err error
			if tc.anthropic {
				_, err = spAnthropic(g, aoption.WithAPIKey(tc.key)).Messages.New(ctx, anthropic.MessageNewParams{
					Model: "claude-haiku-4-5", MaxTokens: 256,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello."))}},
					aoption.WithResponseInto(&resp))
			} else {
				_, err = spOpenAI(g, option.WithAPIKey(tc.key)).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello.")}},
					option.WithResponseInto(&resp))
			}
			if tc.status != 200 {
				if err == nil {
					t.Fatalf("unknown key accepted")
				}
				if resp == nil || resp.StatusCode != tc.status {
					t.Fatalf("error %v, want status %d", err, tc.status)
				}
				// The raw body, in the caller's provider format.
				route, hdr, body, provider := "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + tc.key}, spChatBody(false, ""), "openai"
				if tc.anthropic {
					route, hdr, body, provider = "/v1/messages", map[string]string{"X-Api-Key": tc.key, "Anthropic-Version": "2023-06-01"}, spMessagesBody(false), "anthropic"
				}
				r, b := spPost(t, g, route, hdr, body)
				if r.StatusCode != tc.status {
					t.Fatalf("raw status %d: %s", r.StatusCode, b)
				}
				spCheckErrorFormat(t, provider, b)
				if n := len(up.requests()); n != 0 {
					t.Fatalf("upstream saw %d calls for an unknown key", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			reqs := up.requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d calls", len(reqs))
			}
			for k, v := range tc.wantHeader {
				if got := reqs[0].Header.Get(k); got != v {
					t.Errorf("upstream %s %q, want %q (headers %v)", k, got, v, reqs[0].Header)
				}
			}
			if tc.mod != nil { // the virtual key never leaves the gateway
				for k, vs := range reqs[0].Header {
					if strings.Contains(strings.Join(vs, ","), tc.key) {
						t.Errorf("upstream header %s carries the virtual key", k)
					}
				}
				if bytes.Contains(reqs[0].Body, []byte(tc.key)) {
					t.Errorf("upstream body carries the virtual key")
				}
			}
			rec := runRecord(t, g, spCheckRunHeaders(t, resp.Header, "1"))
			if tc.tenant != "" {
				if rec.Tenant != tc.tenant || rec.Team != tc.team {
					t.Fatalf("tenant %q team %q, want %q %q", rec.Tenant, rec.Team, tc.tenant, tc.team)
				}
				return
			}
			hash, ok := strings.CutPrefix(rec.Tenant, "key-")
			if _, err := hex.DecodeString(hash); !ok || err != nil || len(hash) < 8 || strings.Contains(rec.Tenant, tc.key) {
				t.Fatalf("tenant %q, want key-<hash of the key>", rec.Tenant)
			}
		})
	}

	t.Run("own x-api-key passes through", func(t *testing.T) {
		t.Parallel()
		m := &toolLoop{in: 100, out: 10}
		up := newUpstream(t, m.serve)
		g := startGateway(t, up.URL)
		resp, b := spPost(t, g, "/v1/messages", map[string]string{"X-Api-Key": "sk-ant-raw-own", "Anthropic-Version": "2023-06-01"}, spMessagesBody(false))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if got := up.requests()[0].Header.Get("X-Api-Key"); got != "sk-ant-raw-own" {
			t.Fatalf("upstream x-api-key %q", got)
		}
		if rec := runRecord(t, g, spCheckRunHeaders(t, resp.Header, "1")); !strings.HasPrefix(rec.Tenant, "key-") {
			t.Fatalf("tenant %q", rec.Tenant)
		}
	})

	// The tenant hash is stable for one key and differs between keys.
	t.Run("own key tenant is a stable hash", func(t *testing.T) {
		t.Parallel()
		m := &toolLoop{in: 100, out: 10}
		up := newUpstream(t, m.serve)
		g := startGateway(t, up.URL)
		tenant := func(key, q string) string {
			var resp *http.Response
			_, err := spOpenAI(g, option.WithAPIKey(key)).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(q)}},
				option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			return runRecord(t, g, resp.Header.Get("X-Run-Id")).Tenant
		}
		a1, a2, b := tenant("sk-key-a", "one"), tenant("sk-key-a", "two"), tenant("sk-key-b", "three")
		if a1 != a2 || a1 == b {
			t.Fatalf("tenants %q %q for one key, %q for another", a1, a2, b)
		}
	})
}
