package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire/openai"
)

// A run whose agent went away ends at its deadline, by the sweeper, with
// the record its next call would have given it, and then leaves memory.
func TestOverdueRunsEndAtTheirDeadline(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	p, _ := boltPipeline(t, t.TempDir(), now)
	ctx := context.Background()
	for _, c := range []struct{ id, budget string }{{"r-gone", "deadline_ms=60000"}, {"r-slow", "deadline_ms=600000"}} {
		step(p, &pipeline.Call{Body: taskBody, RunID: c.id, RunBudget: c.budget}, toolResponse)
	}
	// One call in flight past its deadline is left to its own end.
	inflight := p.Begin(ctx, &pipeline.Call{Body: taskBody, RunID: "r-busy", RunBudget: "deadline_ms=60000"}, openai.Chat{})
	if n := p.EndOverdue(); n != 0 {
		t.Fatalf("ended %d runs before any deadline", n)
	}
	clock = clock.Add(61 * time.Second)
	if n := p.EndOverdue(); n != 1 {
		t.Fatalf("ended %d runs, want r-gone", n)
	}
	rec, _, _ := p.Record("r-gone")
	if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonDeadline {
		t.Fatalf("r-gone: %+v", rec)
	}
	for _, id := range []string{"r-slow", "r-busy"} {
		if rec, _, _ := p.Record(id); rec.Status.Final() {
			t.Fatalf("%s ended: %+v", id, rec)
		}
	}
	p.Finish(ctx, inflight, pipeline.Outcome{Status: 200, Body: []byte(toolResponse)})
	// Its next call gets the termination; it leaves memory like any ended run.
	if turn := p.Begin(ctx, &pipeline.Call{Body: taskBody, RunID: "r-gone"}, openai.Chat{}); turn.Answer == nil {
		t.Fatal("a call to the overdue run was forwarded")
	}
	clock = clock.Add(time.Minute)
	if p.SweepEnded(); p.Runs().Get("r-gone") != nil {
		t.Fatal("the ended run stayed in memory")
	}
}

// A run restored in the middle of a model call (its process died with the
// call) has nothing in flight: with the embedded store only the process
// that wrote the run could have had a call going, so the restart puts the
// run back to ready and the sweeper ends it at its deadline. With replicas
// sharing the store the stored state says a call was in flight, and that
// call may be another replica's: the run waits out the upstream timeout
// past its deadline before the sweeper ends it.
func TestOverdueRunCaughtInACall(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		lock pipeline.RunLock // replicas share the store
		wait time.Duration    // past the deadline before the run ends
	}{{"embedded", nil, 0}, {"shared", soleLock{}, 10 * time.Minute}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clock := time.Unix(1_800_000_000, 0)
			now := func() time.Time { return clock }
			dir := t.TempDir()
			p, st := boltPipeline(t, dir, now)
			ctx := context.Background()
			if turn := p.Begin(ctx, &pipeline.Call{Body: taskBody, RunID: "r-cut", RunBudget: "deadline_ms=60000"}, openai.Chat{}); turn.Answer != nil {
				t.Fatalf("refused: %s", turn.Answer.Body)
			}
			p.SaveUnsaved() // what its timer does a millisecond after the call went out
			st.Close()      // the process dies with the call in flight

			pol, err := policy.New(ctx, policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p2 := pipeline.New(pipeline.Options{Policy: pol, Store: openBolt(t, dir), RunLock: c.lock, Now: now})
			if _, err := p2.Restore(ctx); err != nil {
				t.Fatal(err)
			}
			clock = clock.Add(2 * time.Minute) // past the deadline, within the upstream timeout (10 min)
			// Shared: a call may be in flight.
			want := 0
			if c.wait == 0 {
				want = 1
			}
			if n := p2.EndOverdue(); n != want {
				t.Fatalf("ended %d runs, want %d", n, want)
			}
			clock = clock.Add(c.wait)
			if c.wait > 0 {
				if n := p2.EndOverdue(); n != 1 {
					t.Fatalf("ended %d runs, want r-cut", n)
				}
			}
			if rec, _, _ := p2.Record("r-cut"); rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonDeadline {
				t.Fatalf("r-cut: %+v", rec)
			}
		})
	}
}

// soleLock is a RunLock for one process that stands for replicas sharing
// the store: nothing else takes the run.
type soleLock struct{}

func (soleLock) Lock(context.Context, string) (func(), error) { return func() {}, nil }
