package e2e

import (
	"testing"

	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/runstate"
)

// A sub-agent (X-Parent-Run-Id) spends its parent's budget as well as its
// own: with 5 of its parent's 6 steps left, the sub-agent's 5th step is its
// wrap-up, and the parent has none left after it.
func TestSubAgentSpendsItsParentsBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		anthropic bool
	}{{"openai", false}, {"anthropic stream", true}} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1000, in: 500, out: 40}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			agent := func(maxSteps int, headers ...string) (steps int, finish string) {
				t.Helper()
				if tc.anthropic {
					var opts []aoption.RequestOption
					for i := 0; i < len(headers); i += 2 {
						opts = append(opts, aoptionHeader(headers[i], headers[i+1]))
					}
					_, steps, finish, _ = anthropicAgent(t, anthropicClient(g), true, maxSteps, opts...)
					return steps, finish
				}
				var opts []option.RequestOption
				for i := 0; i < len(headers); i += 2 {
					opts = append(opts, option.WithHeader(headers[i], headers[i+1]))
				}
				_, steps, finish, _ = openaiAgent(t, openaiClient(g), false, maxSteps, opts...)
				return steps, finish
			}
			agent(1, "X-Run-Id", "r-parent", "X-Run-Budget", "max_steps=6")
			steps, finish := agent(20, "X-Run-Id", "r-child", "X-Parent-Run-Id", "r-parent")
			if steps != 5 || (finish != "stop" && finish != "end_turn") {
				t.Fatalf("sub-agent: %d steps, finish %q", steps, finish)
			}
			child := settledRecord(t, g, "r-child")
			if child.ParentID != "r-parent" || child.AgentSteps != 5 || child.Status != runstate.CompletedWithDegradation ||
				child.Reason != runstate.ReasonMaxSteps {
				t.Fatalf("sub-agent record: %+v", child)
			}
			reqs := up.requests()
			if len(reqs) != 6 || hasTools(reqs[5].Body) {
				t.Fatalf("upstream saw %d calls, the last with tools %v", len(reqs), len(reqs) > 0 && hasTools(reqs[len(reqs)-1].Body))
			}
			// The parent's next step finds its budget spent by its sub-agent.
			agent(1, "X-Run-Id", "r-parent")
			parent := settledRecord(t, g, "r-parent")
			if n := len(up.requests()); n != 6 || !parent.Status.Final() || parent.Reason != runstate.ReasonMaxSteps {
				t.Fatalf("parent after its sub-agent: upstream calls %d, record %+v", n, parent)
			}
		})
	}
}
