package redisbook

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/redisstore"
	"github.com/haltline/haltline/store/redisstore/redistest"
	"github.com/haltline/haltline/wire/openai"
	"github.com/redis/go-redis/v9"
)

// replicas are n pipelines as n replicas on one Redis run them (each its
// own client, store, book and run locks, one prefix), with the first
// one's book and each one's store.
func replicas(t *testing.T, n int) ([]*pipeline.Pipeline, *Book, []*redisstore.Store) {
	t.Helper()
	prefix := redistest.Prefix(t)
	t.Cleanup(func() { redistest.Drop(redisURL, prefix) })
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pipeline.Pipeline
	var first *Book
	var stores []*redisstore.Store
	for range n {
		st, err := redisstore.Open(redisURL, prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
		book := New(st.Client(), prefix)
		if first == nil {
			first = book
		}
		out = append(out, pipeline.New(pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: RunLock[store.Op]{Locker: st, Book: book}}))
	}
	return out, first, stores
}

// mustBegin begins a model call of the run on p, which must go to the
// provider.
func mustBegin(t *testing.T, p *pipeline.Pipeline, run string) *pipeline.Turn {
	t.Helper()
	tn := p.Begin(context.Background(), &pipeline.Call{Body: benchBody(), RunID: run}, openai.Chat{})
	if tn.Answer != nil {
		t.Fatalf("refused: %s", tn.Answer.Body)
	}
	return tn
}

// modelCallSteps is the step of each model call event of the run's
// timeline, as p reads it.
func modelCallSteps(t *testing.T, p *pipeline.Pipeline, run string) []int64 {
	t.Helper()
	evs, _, err := p.Events(run)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, e := range evs {
		if e.Type == runstate.EventModelCall {
			steps = append(steps, e.Step)
		}
	}
	return steps
}

// A call's end on the replica that moved its run last is written without
// the run's lock, guarded by the stored run. When the other replica moved
// the run meanwhile (a call of its own begun and ended while the first
// was with the provider), the guard refuses the write, and the end is
// made again on the stored run under the lock: no step, token or event of
// either replica's calls is lost, and each call is booked once.
func TestGuardedFinishFallsBackOnConflict(t *testing.T) {
	t.Parallel()
	ps, book, stores := replicas(t, 2)
	a, b := ps[0], ps[1]
	ctx := context.Background()
	const run = "r-conflict"
	a.Finish(ctx, mustBegin(t, a, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(1)})
	inFlight := mustBegin(t, a, run)
	b.Finish(ctx, mustBegin(t, b, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(2)})
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
		if calls := modelCallSteps(t, p, run); len(calls) != 3 {
			t.Errorf("%s: %d model call events, want 3", name, len(calls))
		}
	}
	_, spent, reserved := snapshot(t, book, "run:"+run, time.Now())
	if spent.Steps != 3 || spent.InputTokens != 3000 || reserved.Steps != 0 {
		t.Errorf("run ledger: spent %+v, reserved %+v; want 3 steps and 3000 input tokens spent, nothing reserved", spent, reserved)
	}
	// The end made again left the run's calls in flight as they were (none):
	// after a call that reads its ledger again, the next goes without the
	// lock, in 2 round trips.
	a.Finish(ctx, mustBegin(t, a, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(4)})
	rt := &roundTrips{book: book}
	stores[0].Client().AddHook(rt)
	a.Finish(ctx, mustBegin(t, a, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(5)})
	if n := rt.n.Load(); n > 2 {
		t.Errorf("the call after: %d round trips, want 2", n)
	}
}

// guardSignal tells, on a client, when a guarded write's round trip is
// back.
type guardSignal struct{ done chan struct{} }

func (g *guardSignal) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *guardSignal) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *guardSignal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if slices.ContainsFunc(cmds, isGuardedWrite) {
			select {
			case g.done <- struct{}{}:
			default:
			}
		}
		return err
	}
}

// When another replica holds the run's lock as a call ends, the guarded
// write is refused; the run was not moved, so the call's end stands as
// made and is committed under the lock once it is free, whole: its step,
// its events and its ledger's settlement, each once.
func TestGuardedFinishWaitsForAHeldLock(t *testing.T) {
	t.Parallel()
	ps, book, stores := replicas(t, 2)
	a := ps[0]
	sig := &guardSignal{done: make(chan struct{}, 1)}
	stores[0].Client().AddHook(sig)
	ctx := context.Background()
	const run = "r-held"
	a.Finish(ctx, mustBegin(t, a, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(1)})
	tn := mustBegin(t, a, run)
	// Another replica holds the run's lock as the call ends (it has it
	// once Begin's commit let go of it).
	unlock, err := stores[1].Lock(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-sig.done: // the first call's
	default:
	}
	finished := make(chan struct{})
	go func() {
		a.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: toolCallAnswer(2)})
		close(finished)
	}()
	<-sig.done
	unlock()
	<-finished
	rec, ok, err := a.Record(run)
	if err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if rec.AgentSteps != 2 || rec.InputTokens != 2000 || rec.ToolCalls != 2 {
		t.Errorf("%d steps, %d input tokens, %d tool calls; want 2, 2000, 2", rec.AgentSteps, rec.InputTokens, rec.ToolCalls)
	}
	// The other replica reads the run from the store.
	if calls := modelCallSteps(t, ps[1], run); len(calls) != 2 {
		t.Errorf("%d model call events stored, want 2", len(calls))
	}
	if rec, _, _ := ps[1].Record(run); rec.AgentSteps != 2 {
		t.Errorf("the other replica reads %d steps, want 2", rec.AgentSteps)
	}
	_, spent, reserved := snapshot(t, book, "run:"+run, time.Now())
	if spent.Steps != 2 || reserved.Steps != 0 {
		t.Errorf("run ledger: spent %+v, reserved %+v; want 2 steps spent, nothing reserved", spent, reserved)
	}
}

// A call's start without the run's lock is refused when the other
// replica moved the run since this one's last call, and when its
// reservation falls short; it is then begun anew under the lock, on the
// run as stored: the hold it made is released, and nothing of the
// refused start stays (its model call, its step, its reservation).
func TestGuardedBeginFallsBack(t *testing.T) {
	t.Parallel()
	ps, book, stores := replicas(t, 2)
	a, b := ps[0], ps[1]
	ctx := context.Background()
	call := func(p *pipeline.Pipeline, run string, k int) *pipeline.Turn {
		t.Helper()
		budget := ""
		if run == "r-short" {
			budget = "max_tokens=100000"
		}
		tn := p.Begin(ctx, &pipeline.Call{Body: benchBody(), RunID: run, RunBudget: budget}, openai.Chat{})
		if tn.Answer == nil {
			p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: toolCallAnswer(k)})
		}
		return tn
	}
	warmUp(a) // the scripts loaded: each call below goes as it would
	warmUp(b)
	// Moved by the other replica between two calls of this one.
	const run = "r-moved"
	for i, p := range []*pipeline.Pipeline{a, b, a} {
		if tn := call(p, run, i); tn.Answer != nil && i < 2 {
			t.Fatalf("call %d refused: %s", i+1, tn.Answer.Body)
		}
	}
	rec, _, err := a.Record(run)
	if err != nil {
		t.Fatal(err)
	}
	_, spent, reserved := snapshot(t, book, "run:"+run, time.Now())
	if rec.ModelCalls != int64(spent.Steps) || reserved != (accounting.Vector{}) {
		t.Errorf("moved: %d model calls, %d steps spent, %+v reserved; want as many calls as steps, nothing reserved", rec.ModelCalls, spent.Steps, reserved)
	}
	if rec.AgentSteps != spent.Steps || spent.Steps < 2 {
		t.Errorf("moved: %d steps counted, %d spent", rec.AgentSteps, spent.Steps)
	}
	// The refused start left no call in flight: the next goes without the
	// lock, in 2 round trips.
	rt := &roundTrips{book: book}
	stores[0].Client().AddHook(rt)
	call(a, run, 4)
	if n := rt.n.Load(); n > 2 {
		t.Errorf("moved, the call after: %d round trips, want 2", n)
	}
	// Stored by the other replica, new to this one: its write as a new
	// run is refused, and the lock brings the run in.
	const elsewhere = "r-elsewhere"
	call(b, elsewhere, 1)
	call(a, elsewhere, 2)
	rec, _, err = a.Record(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	_, spent, reserved = snapshot(t, book, "run:"+elsewhere, time.Now())
	if rec.ModelCalls != 2 || rec.AgentSteps != 2 || spent.Steps != 2 || reserved != (accounting.Vector{}) {
		t.Errorf("elsewhere: %d model calls, %d steps, %d spent, %+v reserved; want 2, 2, 2, none", rec.ModelCalls, rec.AgentSteps, spent.Steps, reserved)
	}
	// A new run named by nobody (made by this call), whose first
	// reservation falls short: begun anew under the lock on a run made
	// anew, which the call's refusal ends, with no model call counted.
	tiny := a.Begin(ctx, &pipeline.Call{Body: benchBody(), RunBudget: "max_tokens=100"}, openai.Chat{})
	if tiny.Answer == nil {
		t.Fatal("a call past its new run's token budget was forwarded")
	}
	a.Finish(ctx, tiny, pipeline.Outcome{})
	name := runstate.NameOf(tiny.RunID())
	rec, _, err = b.Record(name)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ModelCalls != 0 {
		t.Errorf("a refused first call: %d model calls counted, want 0", rec.ModelCalls)
	}
	tevs, _, err := b.Events(name)
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, e := range tevs {
		if e.Type == runstate.EventTransition && e.Detail == "run started" {
			started++
		}
	}
	if started != 1 {
		t.Errorf("a refused first call: the run started %d times, want once", started)
	}
	// A step taken on the run's ledger from elsewhere (a sub-agent's call
	// draws on it) between two calls: the second is the third step.
	const steps = "r-steps"
	call(a, steps, 1)
	other := mustReserve(t, book, []string{"run:" + steps}, accounting.Vector{Steps: 1}, false, time.Minute, time.Now())
	call(a, steps, 2)
	if err := book.Settle(ctx, other, accounting.Vector{Steps: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := modelCallSteps(t, a, steps); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("steps of the model calls %v, want [1 3]", got)
	}
	// A shortfall this replica cannot see: the run's ledger drawn on from
	// elsewhere, in tokens only (its steps stay as counted), between two
	// calls.
	const short = "r-short"
	if tn := call(a, short, 1); tn.Answer != nil {
		t.Fatalf("first call refused: %s", tn.Answer.Body)
	}
	_, spent, _ = snapshot(t, book, "run:"+short, time.Now())
	drawn := mustReserve(t, book, []string{"run:" + short}, accounting.Vector{Tokens: 100_000 - spent.Tokens - 100}, true, time.Minute, time.Now())
	tn := call(a, short, 2)
	if tn.Answer == nil {
		t.Fatal("a call past the run's token budget was forwarded")
	}
	if err := book.Release(ctx, drawn); err != nil {
		t.Fatal(err)
	}
	rec, _, err = a.Record(short)
	if err != nil {
		t.Fatal(err)
	}
	_, spent, reserved = snapshot(t, book, "run:"+short, time.Now())
	if rec.ModelCalls != 1 || spent.Steps != 1 || reserved != (accounting.Vector{}) || rec.Status != runstate.Terminated {
		t.Errorf("short: %d model calls, state %s, %d steps spent, %+v reserved; want 1, terminated, 1, none",
			rec.ModelCalls, rec.Status, spent.Steps, reserved)
	}
	if rec2, _, _ := b.Record(short); rec2.ModelCalls != 1 || rec2.Status != runstate.Terminated {
		t.Errorf("short, read by the other replica: %d model calls, state %s", rec2.ModelCalls, rec2.Status)
	}
}

// A tool call's end takes the run as stored: a model call the other
// replica made on the run while the tool ran is not written over.
func TestFinishToolTakesTheStoredRun(t *testing.T) {
	t.Parallel()
	ps, _, _ := replicas(t, 2)
	a, b := ps[0], ps[1]
	ctx := context.Background()
	const run = "r-tool-moved"
	a.Finish(ctx, mustBegin(t, a, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(1)})
	tt := a.BeginTool(ctx, &pipeline.ToolCall{Name: "read", Arguments: []byte(`{"page":1}`), RunID: run})
	if tt.Answer != nil {
		t.Fatalf("tool call answered by the gateway: %+v", tt.Answer)
	}
	b.Finish(ctx, mustBegin(t, b, run), pipeline.Outcome{Status: 200, Body: toolCallAnswer(2)})
	a.FinishTool(ctx, tt, pipeline.ToolOutcome{Text: "page text"})
	for name, p := range map[string]*pipeline.Pipeline{"a": a, "b": b} {
		rec, _, err := p.Record(run)
		if err != nil {
			t.Fatal(err)
		}
		if rec.ModelCalls != 2 || rec.AgentSteps != 2 {
			t.Errorf("%s: %d model calls, %d steps; want 2, 2 (the other replica's kept)", name, rec.ModelCalls, rec.AgentSteps)
		}
	}
}
