package e2e

import (
	"testing"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// A three-step tool loop sent with no run headers is one run, metered
// exactly from the upstream's usage and the catalog's prices.
func TestThreeStepToolLoopIsOneRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		stream    bool
		anthropic bool
	}{
		{"openai", false, false}, {"openai stream", true, false},
		{"anthropic", false, true}, {"anthropic stream", true, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 2, in: 1234, out: 56}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			var runID, finish string
			var steps int
			model, provider := "gpt-4o-mini", "openai"
			if tc.anthropic {
				runID, steps, finish, _ = anthropicAgent(t, anthropicClient(g), tc.stream, 10)
				model, provider = "claude-haiku-4-5", "anthropic"
			} else {
				runID, steps, finish, _ = openaiAgent(t, openaiClient(g), tc.stream, 10)
			}
			if steps != 3 || (finish != "stop" && finish != "end_turn") {
				t.Fatalf("steps %d finish %q", steps, finish)
			}
			rec := settledRecord(t, g, runID)
			if rec.Status != runstate.Completed || rec.AgentSteps != 3 || rec.ModelCalls != 3 || rec.ToolCalls != 2 {
				t.Fatalf("record %+v", rec)
			}
			if rec.InputTokens != 3*1234 || rec.OutputTokens != 3*56 {
				t.Fatalf("tokens in %d out %d", rec.InputTokens, rec.OutputTokens)
			}
			price, ok := accounting.DefaultCatalog().Lookup(model)
			if !ok {
				t.Fatal("no price")
			}
			want := 3 * price.Cost(provider, wire.Usage{InputTokens: 1234, OutputTokens: 56})
			if accounting.Money(rec.ActualCostPicoUSD) != want {
				t.Fatalf("cost %d pUSD, want %d", rec.ActualCostPicoUSD, want)
			}
			if len(up.requests()) != 3 {
				t.Fatalf("upstream saw %d calls", len(up.requests()))
			}
		})
	}
}
