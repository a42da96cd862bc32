package redisbook

import (
	"context"
	"testing"
	"time"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/redisstore"
	"github.com/haltline/haltline/store/redisstore/redistest"
	"github.com/haltline/haltline/wire/openai"
)

// replicas are n pipelines as n replicas on one Redis run them (each its
// own client, store, book and run locks, one prefix), with the first
// one's book.
func replicas(t *testing.T, n int) ([]*pipeline.Pipeline, *Book) {
	t.Helper()
	prefix := redistest.Prefix(t)
	t.Cleanup(func() { redistest.Drop(redisURL, prefix) })
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pipeline.Pipeline
	var first *Book
	for range n {
		st, err := redisstore.Open(redisURL, prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		book := New(st.Client(), prefix)
		if first == nil {
			first = book
		}
		out = append(out, pipeline.New(pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: RunLock[store.Op]{Locker: st, Book: book}}))
	}
	return out, first
}

// A call's end on the replica that moved its run last is written without
// the run's lock, guarded by the stored run. When the other replica moved
// the run meanwhile (a call of its own begun and ended while the first
// was with the provider), the guard refuses the write, and the end is
// made again on the stored run under the lock: no step, token or event of
// either replica's calls is lost, and each call is booked once.
func TestGuardedFinishFallsBackOnConflict(t *testing.T) {
	t.Parallel()
	ps, book := replicas(t, 2)
	a, b := ps[0], ps[1]
	ctx := context.Background()
	const run = "r-conflict"
	begin := func(p *pipeline.Pipeline) *pipeline.Turn {
		t.Helper()
		tn := p.Begin(ctx, &pipeline.Call{Body: benchBody(), RunID: run}, openai.Chat{})
		if tn.Answer != nil {
			t.Fatalf("refused: %s", tn.Answer.Body)
		}
		return tn
	}
	a.Finish(ctx, begin(a), pipeline.Outcome{Status: 200, Body: toolCallAnswer(1)})
	inFlight := begin(a)
	b.Finish(ctx, begin(b), pipeline.Outcome{Status: 200, Body: toolCallAnswer(2)})
	a.Finish(ctx, inFlight, pipeline.Outcome{Status: 200, Body: toolCallAnswer(3)})
	// Each replica's view, and the ledger: three calls of 1000 input
	// tokens, each a step with one tool call.
	for name, p := range map[string]*pipeline.Pipeline{"a": a, "b": b} {
		rec, ok, err := p.Record(run)
		if err != nil || !ok {
			t.Fatalf("%s: record: %v %v", name, ok, err)
		}
		if rec.AgentSteps != 3 || rec.InputTokens != 3000 || rec.ToolCalls != 3 {
			t.Errorf("%s: %d steps, %d input tokens, %d tool calls; want 3, 3000, 3", name, rec.AgentSteps, rec.InputTokens, rec.ToolCalls)
		}
		evs, _, err := p.Events(run)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		for _, e := range evs {
			if e.Type == runstate.EventModelCall {
				calls++
			}
		}
		if calls != 3 {
			t.Errorf("%s: %d model call events, want 3", name, calls)
		}
	}
	_, spent, reserved := snapshot(t, book, "run:"+run, time.Now())
	if spent.Steps != 3 || spent.InputTokens != 3000 || reserved.Steps != 0 {
		t.Errorf("run ledger: spent %+v, reserved %+v; want 3 steps and 3000 input tokens spent, nothing reserved", spent, reserved)
	}
}
