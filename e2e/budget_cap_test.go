package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3/option"

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
			var runID, finish, text string
			var steps int
			if tc.anthropic {
				runID, steps, finish, text = anthropicAgent(t, anthropicClient(g), tc.stream, 10,
					aoptionHeader("X-Run-Budget", tc.budget), aoptionJSONSet("max_tokens", 64000), aoptionJSONSet("model", tc.model))
			} else {
				runID, steps, finish, text = openaiAgent(t, openaiClient(g), tc.stream, 10,
					option.WithHeader("X-Run-Budget", tc.budget), option.WithJSONSet("max_completion_tokens", 64000), option.WithJSONSet("model", tc.model))
			}
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

// A run whose token budget really runs out, asking for 64,000 output tokens
// on every call, goes on with capped calls while they fit and ends with a
// wrap-up whose worst case fits: spent never passes the budget, and only the
// last call lacks tools.
func TestLargeMaxOutputBudgetRunsOut(t *testing.T) {
	t.Parallel()
	for _, anthropic := range []bool{false, true} {
		t.Run(map[bool]string{false: "openai", true: "anthropic stream"}[anthropic], func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1000, in: 4000, out: 900}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			var runID, finish string
			if anthropic {
				runID, _, finish, _ = anthropicAgent(t, anthropicClient(g), true, 40,
					aoptionHeader("X-Run-Budget", "max_tokens=50000"), aoptionJSONSet("max_tokens", 64000))
			} else {
				runID, _, finish, _ = openaiAgent(t, openaiClient(g), false, 40,
					option.WithHeader("X-Run-Budget", "max_tokens=50000"), option.WithJSONSet("max_completion_tokens", 64000))
			}
			if finish != "stop" && finish != "end_turn" {
				t.Fatalf("finish %q", finish)
			}
			rec := settledRecord(t, g, runID)
			if rec.Status != runstate.CompletedWithDegradation || rec.Reason != runstate.ReasonTokenBudget {
				t.Fatalf("record %+v", rec)
			}
			if rec.TotalTokens > 50000 {
				t.Fatalf("spent %d tokens of 50000", rec.TotalTokens)
			}
			reqs := up.requests()
			if len(reqs) < 5 {
				t.Fatalf("the run was cut short after %d calls", len(reqs))
			}
			last := reqs[len(reqs)-1]
			if hasTools(last.Body) || !strings.Contains(string(last.Body), "best conclusion") {
				t.Fatalf("the last call was no wrap-up: %s", last.Body)
			}
			for i, r := range reqs[:len(reqs)-1] {
				if !hasTools(r.Body) {
					t.Fatalf("call %d before the wrap-up lost its tools", i+1)
				}
			}
		})
	}
}

func aoptionJSONSet(k string, v any) aoption.RequestOption { return aoption.WithJSONSet(k, v) }
