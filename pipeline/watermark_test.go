package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/openai"
)

// A body whose tool output needs no cut is checked against the watermark
// on the estimate its reservation weighed: one over the watermark is
// rewritten under it, one under goes out as the agent sent it.
func TestUncutBodyCheckedAgainstTheWatermark(t *testing.T) {
	t.Parallel()
	cat, err := accounting.ParseCatalog([]byte("models:\n  small-32k:\n    context_window: 32000\n    input_usd_per_mtok: 0.15\n    output_usd_per_mtok: 0.60\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Catalog: cat, Context: &contextmgr.Rewriter{}})
	wm := contextmgr.Watermark(32000, contextmgr.Params{})
	for _, over := range []bool{false, true} {
		body := proseBody(wm, over)
		if est := contextmgr.Estimate(wire.APIChat, body); (est > wm) != over {
			t.Fatalf("the body's estimate %d against the watermark %d", est, wm)
		}
		turn := p.Begin(context.Background(), &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-wm-%v", over)}, openai.Chat{})
		if turn.Answer != nil {
			t.Fatalf("answered: %s", turn.Answer.Body)
		}
		rewritten := len(turn.UpstreamBody) < len(body)
		if rewritten != over {
			t.Fatalf("over the watermark %v: forwarded %d of %d bytes", over, len(turn.UpstreamBody), len(body))
		}
		if !over && !bytes.Contains(turn.UpstreamBody, body[len(body)-2000:len(body)-100]) {
			t.Fatal("a body under the watermark was changed")
		}
		p.Finish(context.Background(), turn, pipeline.Outcome{Status: 200, Body: []byte(finalResponse)})
	}
}

// proseBody is a chat history of short prose turns (no tool output) whose
// estimate is just under the watermark, or over it.
func proseBody(wm int64, over bool) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"small-32k","max_completion_tokens":500,"messages":[{"role":"system","content":"You are an agent."}`)
	turn := strings.Repeat("The report names the regions and the owners of each service. ", 8)
	for i := 0; ; i++ {
		next := fmt.Sprintf(`,{"role":"user","content":"%d %s"},{"role":"assistant","content":"Noted %d."}`, i, turn, i)
		probe := b.String() + next + `]}`
		if contextmgr.Estimate(wire.APIChat, []byte(probe)) > wm {
			if over {
				b.WriteString(next)
			}
			break
		}
		b.WriteString(next)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}
