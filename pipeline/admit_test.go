package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/openai"
)

// bigOutputBody is a tool-bearing chat request asking for the model's
// largest output, as frameworks send.
func bigOutputBody(i int) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-4o-mini","max_completion_tokens":64000,"messages":[{"role":"user","content":"Task %d."}],`+
		`"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`, i)
}

func upstreamCap(t *testing.T, body []byte) (capOut int64, tools bool) {
	t.Helper()
	var req struct {
		MaxCompletionTokens int64             `json:"max_completion_tokens"`
		Tools               []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("upstream body %s: %v", body, err)
	}
	return req.MaxCompletionTokens, len(req.Tools) > 0
}

// Calls admitted at once, each asking for more output than the budget
// holds, go on with lowered caps while the working budget has room and
// then as wrap-ups of the final reserve: what they hold together never
// passes the budget, and no call beyond the working budget carries tools.
func TestLoweredCapsNeverOversell(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, nil, 0)
	const budget, working = 50000, 45000
	turns := make([]*pipeline.Turn, 40)
	var wg sync.WaitGroup
	for i := range turns {
		wg.Go(func() {
			turns[i] = p.Begin(context.Background(), &pipeline.Call{Body: bigOutputBody(i), RunID: "r-caps",
				RunBudget: fmt.Sprintf("max_tokens=%d", budget)}, openai.Chat{})
		})
	}
	wg.Wait()
	var held, heldWithTools int64
	capped := 0
	for _, turn := range turns {
		if turn.Answer != nil {
			continue
		}
		capOut, tools := upstreamCap(t, turn.UpstreamBody)
		worst := accounting.ReserveInput(contextmgr.Estimate(wire.APIChat, turn.Call.Body)) + capOut
		held += worst
		if tools {
			heldWithTools += worst
			if capOut < policy.DefaultMinOutputTokens || capOut >= 64000 {
				t.Fatalf("a call went on with max output %d", capOut)
			}
			capped++
		} else if !strings.Contains(string(turn.UpstreamBody), "best conclusion") {
			t.Fatalf("a call lost its tools without being the wrap-up: %s", turn.UpstreamBody)
		}
	}
	t.Logf("%d calls went on with lowered caps; %d tokens held", capped, held)
	if capped == 0 || held > budget || heldWithTools > working {
		t.Fatalf("%d capped calls; held %d (with tools %d) of %d", capped, held, heldWithTools, budget)
	}
}

// The floor is policy: with min_output_tokens above what fits, the call
// that does not fit is the wrap-up rather than a call with a starved cap.
func TestOutputFloorFromPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc    string
		floor   int64
		wrapped bool
	}{{"default floor", 0, false}, {"floor above what fits", 48000, true}} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			opts := policy.Options{}
			if tc.floor > 0 {
				opts.Data = map[string]any{"budgets": map[string]any{"defaults": map[string]any{"min_output_tokens": tc.floor}}}
			}
			pol, err := policy.New(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			p := pipeline.New(pipeline.Options{Policy: pol})
			turn := p.Begin(context.Background(), &pipeline.Call{Body: bigOutputBody(0), RunID: "r-floor",
				RunBudget: "max_tokens=50000"}, openai.Chat{})
			if turn.Answer != nil {
				t.Fatalf("answered: %s", turn.Answer.Body)
			}
			capOut, tools := upstreamCap(t, turn.UpstreamBody)
			if tools == tc.wrapped || capOut >= 64000 {
				t.Fatalf("tools %v, max output %d", tools, capOut)
			}
			p.Finish(context.Background(), turn, pipeline.Outcome{Status: 200, Body: []byte(finalResponse)})
		})
	}
}

// The input a call reserves is the context manager's estimate of its body
// plus the margin. Once the provider has counted a call of the run above
// its estimate, the run's next call reserves by that ratio, so that a
// tokenizer the estimate misjudges does not take spent past a budget; a
// count back under the estimate ends the correction.
func TestReservedInputFollowsTheProviderCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pol, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	book := accounting.NewMemBook()
	p := pipeline.New(pipeline.Options{Policy: pol, Book: book})
	call := func(size int, counted func(est int64) int64) (est, reserved int64) {
		t.Helper()
		body := chatBody(size)
		turn := p.Begin(ctx, &pipeline.Call{Body: body, RunID: "r-count", RunBudget: "max_tokens=1000000"}, openai.Chat{})
		if turn.Answer != nil {
			t.Fatalf("answered: %s", turn.Answer.Body)
		}
		_, _, held, err := book.Snapshot(ctx, "run:r-count", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		est = contextmgr.Estimate(wire.APIChat, body)
		resp := fmt.Sprintf(`{"id":"c","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,`+
			`"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":20,"total_tokens":1}}`,
			counted(est))
		p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(resp)})
		return est, held.InputTokens
	}
	twice := func(est int64) int64 { return 2 * est }
	half := func(est int64) int64 { return est / 2 }
	if est, got := call(6000, twice); got != accounting.ReserveInput(est) {
		t.Fatalf("first call reserved %d input tokens for an estimate of %d", got, est)
	}
	// The provider counted twice the estimate: the next body, which
	// begins with the last, reserves twice its estimate and the margin.
	if est, got := call(7000, half); got < accounting.ReserveInput(2*est) || got > accounting.ReserveInput(2*est+2) {
		t.Fatalf("after a count of twice the estimate: reserved %d for an estimate of %d", got, est)
	}
	if est, got := call(8000, half); got != accounting.ReserveInput(est) {
		t.Fatalf("after a count under the estimate: reserved %d for an estimate of %d", got, est)
	}
}

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
