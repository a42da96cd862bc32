package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/runstate"
)

// forwardedMaxOutput is the output cap a forwarded request carries, in
// whichever key its API uses; 0 when it states none.
func forwardedMaxOutput(body []byte) int64 {
	var req struct {
		MaxCompletionTokens int64 `json:"max_completion_tokens"`
		MaxTokens           int64 `json:"max_tokens"`
		MaxOutputTokens     int64 `json:"max_output_tokens"`
	}
	_ = json.Unmarshal(body, &req)
	return max(req.MaxCompletionTokens, req.MaxTokens, req.MaxOutputTokens)
}

func runEvents(t *testing.T, adminBase, runID string) []runstate.Event {
	t.Helper()
	var timeline struct{ Events []runstate.Event }
	getJSON(t, adminBase+"/api/v1/runs/"+runID+"/events", &timeline)
	return timeline.Events
}

func eventsOf(evs []runstate.Event, typ string) []runstate.Event {
	var out []runstate.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// Frameworks ask for the model's largest output (the Vercel AI SDK sends
// max_tokens 64,000 for Claude Haiku 4.5). Under a budget smaller than that
// worst case, a healthy 4-step run completes normally: each call goes
// upstream with its tools and an output cap lowered to what fits, never as
// the wrap-up.
func TestLargeMaxOutputUnderBudgetCompletes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		budget    string
		model     string // the priced model the request names
		stream    bool
		anthropic bool
	}{
		{"tokens openai", "max_tokens=50000", "gpt-4o-mini", false, false},
		{"tokens openai stream", "max_tokens=50000", "gpt-4o-mini", true, false},
		{"tokens anthropic", "max_tokens=50000", "claude-haiku-4-5", false, true},
		{"tokens anthropic stream", "max_tokens=50000", "claude-haiku-4-5", true, true},
		{"cost openai", "max_cost_usd=0.1", "gpt-4o", false, false},
		{"cost anthropic stream", "max_cost_usd=0.1", "claude-haiku-4-5", true, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 3, in: 500, out: 40}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			runID, steps, finish, text := budgetAgent(t, g, tc.anthropic, tc.stream, 10, tc.budget, 64000, tc.model)
			if steps != 4 || (finish != "stop" && finish != "end_turn") || !strings.Contains(text, "after 3 results") {
				t.Fatalf("agent: steps %d finish %q text %q", steps, finish, text)
			}
			rec := settledRecord(t, g, runID)
			if rec.Status != runstate.Completed || rec.Reason != runstate.ReasonCompleted {
				t.Fatalf("record %+v", rec)
			}
			reqs := up.requests()
			if len(reqs) != 4 {
				t.Fatalf("upstream saw %d calls", len(reqs))
			}
			for i, r := range reqs {
				capOut := forwardedMaxOutput(r.Body)
				if !hasTools(r.Body) || strings.Contains(string(r.Body), "best conclusion") {
					t.Fatalf("call %d went upstream as a wrap-up: %s", i+1, r.Body)
				}
				if capOut < 1024 || capOut >= 64000 {
					t.Fatalf("call %d forwarded with max output %d", i+1, capOut)
				}
			}
			evs := runEvents(t, adminURL(g), runID)
			capped := eventsOf(evs, runstate.EventOutputCapped)
			if len(capped) != 4 || !strings.Contains(capped[0].Detail, "64000 → ") {
				t.Fatalf("output_capped events %+v", capped)
			}
			if w := eventsOf(evs, runstate.EventWrapUp); len(w) != 0 {
				t.Fatalf("wrap-up events %+v", w)
			}
		})
	}
}

// rejectAgent runs openai-go's tool loop (default retries) until a call
// fails; it returns the steps answered and that call's error, response and
// body.
func rejectAgent(t *testing.T, g *app.Gateway, opts ...option.RequestOption) (steps int, err error, resp *http.Response, body []byte) {
	t.Helper()
	keep := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(req)
		if err == nil && resp.StatusCode >= 400 {
			body, _ = io.ReadAll(resp.Body)
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
		return resp, err
	}
	client := openai.NewClient(option.WithBaseURL(gwURL(g)+"/v1"), option.WithAPIKey("sk-x"), option.WithMiddleware(keep))
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report page by page.")}
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})}
	for steps < 50 {
		params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools}
		c, err := client.Chat.Completions.New(context.Background(), params, append(opts, option.WithResponseInto(&resp))...)
		if err != nil {
			return steps, err, resp, body
		}
		steps++
		msg := c.Choices[0].Message
		if c.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("step %d ended the loop: %q %q", steps, c.Choices[0].FinishReason, msg.Content)
		}
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			msgs = append(msgs, openai.ToolMessage("page text "+tc.Function.Arguments, tc.ID))
		}
	}
	t.Fatal("no call was refused")
	return
}

// In reject mode no call is rewritten: every step the budget allows goes
// upstream with its tools, and the call that would cross a line gets a 429
// in the provider's format, not retried, with the record in its body.
func TestRejectModeNeverRewrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc   string
		budget string
		model  string
		reason string
		in     int64
	}{
		{"steps", "max_steps=3", "gpt-4o-mini", runstate.ReasonMaxSteps, 100},
		{"tokens", "max_tokens=50000", "gpt-4o-mini", runstate.ReasonTokenBudget, 4000},
		{"cost", "max_cost_usd=0.1", "gpt-4o", runstate.ReasonCostBudget, 4000},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1000, in: tc.in, out: 900}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL, withPolicy(policyDir(t, `{"haltline":{"terminations":{"mode":"reject"}}}`)))
			steps, err, resp, raw := rejectAgent(t, g, option.WithHeader("X-Run-Budget", tc.budget),
				option.WithJSONSet("max_completion_tokens", 64000), option.WithJSONSet("model", tc.model))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
				t.Fatalf("after %d steps: want a 429, got %v", steps, err)
			}
			if resp.Header.Get("x-should-retry") != "false" || resp.Header.Get("X-Run-Termination") != tc.reason {
				t.Fatalf("headers %v", resp.Header)
			}
			var body struct{ Haltline runstate.Record }
			if err := json.Unmarshal(raw, &body); err != nil || body.Haltline.Reason != tc.reason ||
				body.Haltline.Status != runstate.Terminated || strings.Contains(string(raw), `\u001f`) {
				t.Fatalf("body %s (%v)", raw, err)
			}
			reqs := up.requests()
			if len(reqs) != steps {
				t.Fatalf("%d steps answered, %d calls reached the upstream", steps, len(reqs))
			}
			if tc.reason == runstate.ReasonMaxSteps && steps != 3 {
				t.Fatalf("%d steps under max_steps=3", steps)
			}
			if steps < 3 {
				t.Fatalf("the run was refused after %d steps", steps)
			}
			for i, r := range reqs {
				if !hasTools(r.Body) || strings.Contains(string(r.Body), "best conclusion") {
					t.Fatalf("call %d was rewritten: %s", i+1, r.Body)
				}
			}
			if n := counterValue(t, g, "haltline_model_calls_total", map[string]string{"status": "429"}); n != 1 {
				t.Fatalf("gateway answered %v refused calls: the SDK retried", n)
			}
			rec := runRecord(t, g, resp.Header.Get("X-Run-Id"))
			if rec.TotalTokens > 50000 || rec.ActualCostPicoUSD > 100_000_000_000 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// A streamed wrap-up and a streamed answer the gateway gives itself carry
// the run's termination and final state in their headers: the reason is
// known when the call is admitted, before the first byte of the stream.
func TestStreamedEndCarriesTerminationUpFront(t *testing.T) {
	t.Parallel()
	oaHdr := map[string]string{"Authorization": "Bearer sk-agent"}
	anthHdr := map[string]string{"Anthropic-Version": "2023-06-01", "X-Api-Key": "sk-ant-agent"}
	tool := `"tools":[{"type":"function","function":{"name":"read_page","parameters":{"type":"object"}}}]`
	for _, tc := range []struct {
		desc, route, fixture string
		body                 []byte
		hdr                  map[string]string
	}{
		{"chat", "/v1/chat/completions", "openai-chat/stream-text-include-usage.sse",
			spChatBody(true, `,"stream_options":{"include_usage":true},`+tool), oaHdr},
		{"responses", "/v1/responses", "openai-responses/stream-function-call.sse",
			[]byte(`{"model":"gpt-4o","stream":true,"input":"Read the report.","tools":[{"type":"function","name":"read_page","parameters":{"type":"object"}}]}`), oaHdr},
		{"messages", "/v1/messages", "anthropic/stream-text-padded.sse",
			[]byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Read the report."}],` +
				`"tools":[{"name":"read_page","input_schema":{"type":"object"}}]}`), anthHdr},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			sse := fixture(t, tc.fixture)
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { writeSSE(w, sse) })
			g := startGateway(t, up.URL)
			send := func(runID, budget string) http.Header {
				t.Helper()
				hdr := map[string]string{"X-Run-Id": runID, "X-Run-Budget": budget}
				for k, v := range tc.hdr {
					hdr[k] = v
				}
				status, h, body := post(t, gwURL(g)+tc.route, tc.body, hdr)
				if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
					t.Fatalf("%s: status %d %s: %s", runID, status, h.Get("Content-Type"), body)
				}
				return h
			}
			check := func(what string, h http.Header, state runstate.State, reason string) {
				t.Helper()
				if h.Get("X-Run-State") != string(state) || h.Get("X-Run-Termination") != reason {
					t.Fatalf("%s: X-Run-State %q X-Run-Termination %q", what, h.Get("X-Run-State"), h.Get("X-Run-Termination"))
				}
			}
			// The first call of a one-step run is its wrap-up, relayed as a stream.
			check("wrap-up", send("r-wrap", "max_steps=1"), runstate.CompletedWithDegradation, runstate.ReasonMaxSteps)
			if n := len(up.requests()); n != 1 || hasTools(up.requests()[0].Body) {
				t.Fatalf("upstream saw %d calls; the wrap-up kept its tools", n)
			}
			// The next call on the ended run is the gateway's own answer.
			check("ended run", send("r-wrap", "max_steps=1"), runstate.CompletedWithDegradation, runstate.ReasonMaxSteps)
			// No room even for a wrap-up: the gateway answers itself at once.
			check("no room", send("r-tiny", "max_tokens=10"), runstate.Terminated, runstate.ReasonTokenBudget)
			if n := len(up.requests()); n != 1 {
				t.Fatalf("upstream saw %d calls", n)
			}
		})
	}
}

// An Anthropic run with eight tools whose budget runs out is wrapped up by
// the model: the wrap-up's history has its tool blocks flattened into text,
// so the request goes without a single tool definition.
func TestAnthropicWrapUpWithoutToolDefinitions(t *testing.T) {
	t.Parallel()
	tools := make([]map[string]any, 8)
	for i := range tools {
		tools[i] = map[string]any{"name": fmt.Sprintf("tool_%d", i), "description": strings.Repeat("Reads part of the report. ", 20),
			"input_schema": map[string]any{"type": "object"}}
	}
	m := &toolLoop{finalAfter: 1000, in: 3000, out: 400}
	up := newUpstream(t, m.serve)
	g := startGateway(t, up.URL)
	runID, steps, stop, text := anthropicAgent(t, anthropicClient(g), false, 40,
		aoptionHeader("X-Run-Budget", "max_tokens=30000"), aoption.WithJSONSet("tools", tools))
	if stop != "end_turn" || !strings.HasPrefix(text, "Answer after") {
		t.Fatalf("after %d steps: stop %q text %q", steps, stop, text)
	}
	rec := settledRecord(t, g, runID)
	if rec.Status != runstate.CompletedWithDegradation || rec.Reason != runstate.ReasonTokenBudget || rec.TotalTokens > 30000 {
		t.Fatalf("record %+v", rec)
	}
	reqs := up.requests()
	for i, r := range reqs[:len(reqs)-1] {
		if n := strings.Count(string(r.Body), `"input_schema"`); n != 8 {
			t.Fatalf("call %d carried %d tool definitions", i+1, n)
		}
	}
	last := string(reqs[len(reqs)-1].Body)
	if len(reqs) < 3 || strings.Contains(last, `"tools"`) || strings.Contains(last, `"tool_use`) || strings.Contains(last, `"tool_result"`) ||
		!strings.Contains(last, "[called tool read_page") || !strings.Contains(last, "best conclusion") {
		t.Fatalf("%d calls; the wrap-up: %s", len(reqs), last)
	}
}

// budgetAgent runs openaiAgent or anthropicAgent under an X-Run-Budget,
// each request asking for maxOut output tokens (0: the agent's own) of
// model ("": the agent's own).
func budgetAgent(t *testing.T, g *app.Gateway, anthropic, stream bool, maxSteps int, budget string, maxOut int64, model string) (runID string, steps int, finish, text string) {
	t.Helper()
	if anthropic {
		opts := []aoption.RequestOption{aoption.WithHeader("X-Run-Budget", budget)}
		if maxOut > 0 {
			opts = append(opts, aoption.WithJSONSet("max_tokens", maxOut))
		}
		if model != "" {
			opts = append(opts, aoption.WithJSONSet("model", model))
		}
		return anthropicAgent(t, anthropicClient(g), stream, maxSteps, opts...)
	}
	opts := []option.RequestOption{option.WithHeader("X-Run-Budget", budget)}
	if maxOut > 0 {
		opts = append(opts, option.WithJSONSet("max_completion_tokens", maxOut))
	}
	if model != "" {
		opts = append(opts, option.WithJSONSet("model", model))
	}
	return openaiAgent(t, openaiClient(g), stream, maxSteps, opts...)
}
