package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

// taskBody is a chat request with one user message.
var taskBody = []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."}]}`)

// step runs one model call through the pipeline: answered by the upstream
// with answer, unless the gateway answered it itself (then Turn.Answer).
func step(p *pipeline.Pipeline, call *pipeline.Call, answer string) *pipeline.Turn {
	ctx := context.Background()
	turn := p.Begin(ctx, call, openai.Chat{})
	if turn.Answer == nil {
		p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(answer)})
	}
	return turn
}

// openBolt opens the bbolt store in dir, closed when the test ends (a
// test may close it sooner, to restart on it).
func openBolt(t testing.TB, dir string) *store.Bolt {
	t.Helper()
	st, err := store.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// boltPipeline is a pipeline on the bbolt store in dir, with the
// default policies and a settable clock.
func boltPipeline(t testing.TB, dir string, now func() time.Time) (*pipeline.Pipeline, *store.Bolt) {
	t.Helper()
	st := openBolt(t, dir)
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now}), st
}

// A restart loads the runs that can still move, and the ended runs that
// hold tool state; every other ended run stays in the store, and is found
// there as if it had never left memory: by id (its record, timeline and
// termination answer, its ledger not reset) and by lineage.
func TestRestoreLeavesEndedRunsInTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	ctx := context.Background()
	p, st := boltPipeline(t, dir, now)
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."}],"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`)
	call := func(p *pipeline.Pipeline, runID, budget string, echo bool, answer string) *pipeline.Turn {
		t.Helper()
		b := body
		if echo { // the agent sends back the tool call it was asked for
			b = []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."},{"role":"assistant","content":null,"tool_calls":[{"id":"call_x","type":"function","function":{"name":"read","arguments":"{\"page\":1}"}}]},{"role":"tool","tool_call_id":"call_x","content":"page one"}],"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`)
		}
		return step(p, &pipeline.Call{Body: b, RunID: runID, RunBudget: budget}, answer)
	}
	// ended: one step, then its max_steps line ends it (wrapped up: the
	// default mode is finalize); its tool call id is a lineage key. live:
	// one step, a tool call outstanding. held: ended, with an approval
	// ticket.
	call(p, "r-ended", "max_steps=1", false, toolResponse)
	if turn := call(p, "r-ended", "", false, toolResponse); turn.Answer == nil {
		t.Fatal("the second step of a max_steps=1 run was forwarded")
	}
	call(p, "r-live", "max_steps=2", false, `{"id":"chatcmpl-3","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_live","type":"function","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	call(p, "r-held", "", false, finalResponse)
	ticket, _ := json.Marshal(pipeline.Approval{Ticket: "t-held", RunID: "r-held", Tool: "delete_file", Status: "pending",
		Created: clock, Expires: clock.Add(time.Hour)})
	if err := <-st.Apply([]store.Op{{Bucket: store.Approvals, Key: []byte("t-held"), Value: ticket}}); err != nil {
		t.Fatal(err)
	}
	before, _, _ := p.Record("r-ended")
	if !before.Status.Final() || before.Reason != runstate.ReasonMaxSteps || before.AgentSteps != 1 {
		t.Fatalf("setup: %+v", before)
	}
	st.Close()

	p2, _ := boltPipeline(t, dir, now)
	n, err := p2.Restore(ctx)
	if err != nil || n != 1 {
		t.Fatalf("restored %d runs, err %v; want the live one", n, err)
	}
	if p2.Runs().Get("r-live") == nil || p2.Runs().Get("r-ended") != nil {
		t.Fatalf("in memory: live %v, ended %v", p2.Runs().Get("r-live") != nil, p2.Runs().Get("r-ended") != nil)
	}
	if p2.Runs().Get("r-held") == nil || len(p2.Approvals(pipeline.ApprovalFilter{RunID: "r-held"})) != 1 {
		t.Fatal("the ended run holding an approval ticket was not brought back with it")
	}
	// By lineage: the echoed tool call of the ended run finds it in the
	// store, and it answers with its termination instead of starting afresh.
	turn := call(p2, "", "", true, toolResponse)
	if turn.RunID() != "r-ended" || turn.Answer == nil {
		t.Fatalf("lineage: run %q, answered by the gateway %v", turn.RunID(), turn.Answer != nil)
	}
	rec, ok, err := p2.Record("r-ended")
	if err != nil || !ok || rec.Status != before.Status || rec.AgentSteps != 1 || rec.Reason != runstate.ReasonMaxSteps {
		t.Fatalf("record after restart: %+v %v %v", rec, ok, err)
	}
	if evs, ok, err := p2.Events("r-ended"); err != nil || !ok || len(evs) == 0 {
		t.Fatalf("timeline after restart: %d events %v %v", len(evs), ok, err)
	}
	// Its ledger came back with it: resumed with one more step, it has one
	// step (not two) left, since the one it took is still spent.
	if _, err := p2.Resume("r-ended", rec.ResumeToken, accounting.Budget{Vector: accounting.Vector{Steps: 1}}); err != nil {
		t.Fatal(err)
	}
	if turn := call(p2, "r-ended", "", false, toolResponse); turn.Answer != nil {
		t.Fatalf("the resumed run's next step was refused: %s", turn.Answer.Body)
	}
	if turn := call(p2, "r-ended", "", false, toolResponse); turn.Answer == nil {
		t.Fatal("the resumed run took a third step: its ledger was reset by the restart")
	}
	// The live run goes on from its counters and its ledger: its second
	// step is its last.
	if turn := call(p2, "r-live", "", false, toolResponse); turn.Answer != nil {
		t.Fatalf("the live run's second step was refused: %s", turn.Answer.Body)
	}
	if turn := call(p2, "r-live", "", false, toolResponse); turn.Answer == nil {
		t.Fatal("the live run took a third step of two: its ledger was reset by the restart")
	}
	if rec, _, _ := p2.Record("r-live"); rec.AgentSteps != 2 {
		t.Fatalf("live run after restart: %+v", rec)
	}
}

// A sub-agent run draws on its parent's budget (X-Parent-Run-Id) even when
// the parent has ended and left memory: the parent's ledger comes back
// with it from the store.
func TestSubAgentDrawsOnAParentThatLeftMemory(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	p, _ := boltPipeline(t, t.TempDir(), now)
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-parent", RunBudget: "max_steps=3"}, toolResponse)
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-parent"}, finalResponse) // 2 of its 3 steps spent
	clock = clock.Add(time.Minute)
	if p.SweepEnded(); p.Runs().Get("r-parent") != nil {
		t.Fatal("setup: the parent stayed in memory")
	}
	for range 3 {
		if turn := step(p, &pipeline.Call{Body: taskBody, RunID: "r-child", ParentRunID: "r-parent"}, toolResponse); turn.Answer != nil {
			break
		}
	}
	rec, _, _ := p.Record("r-child")
	if !rec.Status.Final() || rec.AgentSteps > 1 {
		t.Fatalf("the child was not held to its parent's last step: %+v", rec)
	}
}

// A long run keeps only its newest events in memory; its timeline is read
// whole, in order, from the store and memory together — while it runs, and
// after it has ended and left memory.
func TestLongRunTimelineIsWhole(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	p, _ := boltPipeline(t, t.TempDir(), now)
	const run, steps = "r-long", 40
	whole := func(when string) int {
		t.Helper()
		evs, ok, err := p.Events(run)
		if err != nil || !ok || len(evs) < 3*(steps/2) {
			t.Fatalf("%s: %d events, %v %v", when, len(evs), ok, err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("%s: event %d has seq %d", when, i, e.Seq)
			}
		}
		return len(evs)
	}
	for k := range steps {
		if turn := step(p, &pipeline.Call{Body: agentStep(run, k), RunID: run}, string(agentAnswer(run, k, steps))); turn.Answer != nil {
			t.Fatalf("step %d refused: %s", k, turn.Answer.Body)
		}
		if k == steps/2 {
			r := p.Runs().Get(run)
			r.Lock()
			held := len(r.Events)
			r.Unlock()
			if held > 32 {
				t.Fatalf("%d events held in memory at step %d", held, k)
			}
			whole("while running")
		}
	}
	n := whole("ended")
	clock = clock.Add(time.Minute)
	if p.SweepEnded(); p.Runs().Get(run) != nil {
		t.Fatal("setup: the run stayed in memory")
	}
	if m := whole("after leaving memory"); m != n {
		t.Fatalf("%d events after leaving memory, %d before", m, n)
	}
}

// A restart leaves an unfinished run's timeline in the store: the run
// comes back with no event in memory, numbers its next events after the
// stored ones, and its timeline reads whole. A snapshot written without
// its last event's number (before it was kept) has its events read back,
// so its next event does not overwrite a stored one.
func TestRestartTimelineIsWhole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const run, steps = "r-restarted", 12
	k := 0
	// Each leg takes two steps on a fresh pipeline over the same store,
	// after restoring what the last one left.
	leg := func(oldSnapshot bool) (held int) {
		t.Helper()
		p, st := boltPipeline(t, dir, time.Now)
		if oldSnapshot {
			v, err := st.Get(store.Runs, []byte(run))
			if err != nil || v == nil {
				t.Fatalf("stored run: %q %v", v, err)
			}
			old := regexp.MustCompile(`,"last_event_seq":\d+`).ReplaceAll(v, nil)
			if len(old) == len(v) {
				t.Fatal("setup: no last_event_seq in the snapshot")
			}
			if err := <-st.Apply([]store.Op{{Bucket: store.Runs, Key: []byte(run), Value: old}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Restore(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := p.Runs().Get(run); r != nil {
			r.Lock()
			held = len(r.Events)
			r.Unlock()
		}
		for range 2 {
			if turn := step(p, &pipeline.Call{Body: agentStep(run, k), RunID: run}, string(agentAnswer(run, k, steps))); turn.Answer != nil {
				t.Fatalf("step %d refused: %s", k, turn.Answer.Body)
			}
			k++
		}
		evs, ok, err := p.Events(run)
		if err != nil || !ok || len(evs) < 3*k/2 {
			t.Fatalf("after step %d: %d events, %v %v", k, len(evs), ok, err)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("after step %d: event %d has seq %d", k, i, e.Seq)
			}
		}
		st.Close()
		return held
	}
	leg(false)
	if held := leg(false); held != 0 {
		t.Fatalf("the restored run held %d events in memory", held)
	}
	if held := leg(true); held == 0 {
		t.Fatal("a snapshot without last_event_seq was restored without its events")
	}
	leg(false)
}

// heldRunScan is a store whose scans of the runs and of the list of
// unfinished runs wait for release: a restart's rebuilding of unfinished
// runs held at its start.
type heldRunScan struct {
	store.Store
	release chan struct{}
}

func (h heldRunScan) Scan(b store.Bucket, fn func(k, v []byte) error) error {
	if b == store.Runs || b == store.Unfinished {
		<-h.release
	}
	return h.Store.Scan(b, fn)
}

// A restart serves before its unfinished runs are rebuilt: a call for one,
// by id or by the tool call it echoes, loads it from the store with its
// spending (its budget is not reset), and the rebuilding, once under way,
// leaves it as the call left it; no ended run leaves memory meanwhile.
func TestCallsWhileRunsAreRestored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, st := boltPipeline(t, dir, time.Now)
	echoed := strings.Replace(toolResponse, "call_x", "call_echoed", 1)
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-called", RunBudget: "max_steps=2"}, toolResponse)
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-echoed"}, echoed)
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-waiting"}, toolResponse)
	st.Close()

	held := heldRunScan{Store: openBolt(t, dir), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(held.release) })
	t.Cleanup(release) // a failed check must not leave the rebuilding waiting
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var later atomic.Int64 // how far the clock has moved on
	now := func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
	p2 := pipeline.New(pipeline.Options{Policy: pol, Store: held, Now: now})
	rebuild, err := p2.StartRestore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-rebuild.Done():
		t.Fatal("StartRestore waited for the runs' rebuilding")
	default:
	}
	if p2.Runs().Get("r-called") != nil {
		t.Fatal("a run was rebuilt before the scan was released")
	}
	if turn := step(p2, &pipeline.Call{Body: taskBody, RunID: "r-called"}, finalResponse); turn.Answer != nil {
		t.Fatalf("second step of a max_steps=2 run refused: %s", turn.Answer.Body)
	}
	if turn := step(p2, &pipeline.Call{Body: taskBody, RunID: "r-called"}, finalResponse); turn.Answer == nil {
		t.Fatal("third step of a max_steps=2 run forwarded: its budget was reset by the restart")
	}
	echo := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."},{"role":"assistant","content":null,"tool_calls":[{"id":"call_echoed","type":"function","function":{"name":"read","arguments":"{\"page\":1}"}}]},{"role":"tool","tool_call_id":"call_echoed","content":"page one"}]}`)
	if turn := step(p2, &pipeline.Call{Body: echo}, toolResponse); turn.RunID() != "r-echoed" {
		t.Fatalf("the echoed tool call went to run %q", turn.RunID())
	}
	called := p2.Runs().Get("r-called")
	later.Store(int64(time.Hour)) // long past the retention of ended runs in memory
	if n := p2.SweepEnded(); n != 0 || p2.Runs().Get("r-called") != called {
		t.Fatalf("an ended run left memory while runs were being rebuilt (%d)", n)
	}

	release()
	n, err := rebuild.Wait()
	if err != nil || n != 1 {
		t.Fatalf("rebuilt %d runs, %v; want r-waiting alone", n, err)
	}
	for id, steps := range map[string]int64{"r-called": 2, "r-echoed": 2, "r-waiting": 1} {
		rec, ok, err := p2.Record(id)
		if !ok || err != nil || rec.AgentSteps != steps {
			t.Fatalf("%s after the rebuilding: %d steps (want %d), %v %v", id, rec.AgentSteps, steps, ok, err)
		}
	}
	if p2.Runs().Get("r-called") != called {
		t.Fatal("the rebuilding replaced a run a call had loaded")
	}
	if rec, _, _ := p2.Record("r-called"); !rec.Status.Final() || rec.Reason != runstate.ReasonMaxSteps {
		t.Fatalf("r-called after the rebuilding: %s %s", rec.Status, rec.Reason)
	}
}

// Unfinished runs are rebuilt by several workers: every one comes back,
// with its spending; a snapshot that does not decode is reported, naming
// its run, stays in the store (a read of it fails), and keeps neither the
// scan nor a worker stuck nor the other runs from coming back.
func TestRestoreManyRunsAndACorruptOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const runs = 300 // more than the workers' queue holds
	id := func(i int) string { return fmt.Sprintf("r-%03d", i) }
	p, st := boltPipeline(t, dir, time.Now)
	for i := range runs {
		step(p, &pipeline.Call{Body: taskBody, RunID: id(i), RunBudget: "max_steps=5"}, toolResponse)
	}
	st.Close()
	p, st = boltPipeline(t, dir, time.Now)
	if n, err := p.Restore(context.Background()); n != runs || err != nil {
		t.Fatalf("restored %d runs, %v", n, err)
	}
	for i := range runs {
		rec, ok, err := p.Record(id(i))
		if !ok || err != nil || rec.AgentSteps != 1 || rec.InputTokens != 1000 || p.Runs().Get(id(i)) == nil {
			t.Fatalf("run %s: %d steps, %d input tokens, %v %v", id(i), rec.AgentSteps, rec.InputTokens, ok, err)
		}
	}
	if err := <-st.Apply([]store.Op{{Bucket: store.Runs, Key: []byte(id(150)), Value: []byte(`{"run":{"id":"r-150","state":"running",`)}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	p, _ = boltPipeline(t, dir, time.Now)
	if n, err := p.Restore(context.Background()); n != runs-1 || err == nil || !strings.Contains(err.Error(), id(150)) {
		t.Fatalf("restore with a corrupt snapshot: %d runs, %v", n, err)
	}
	if _, _, err := p.Record(id(150)); err == nil {
		t.Fatal("the corrupt run's record read without an error")
	}
	if rec, ok, err := p.Record(id(151)); !ok || err != nil || rec.AgentSteps != 1 {
		t.Fatalf("a run after the corrupt one: %+v %v %v", rec, ok, err)
	}
}

// snapshotReads is a store that counts the scans of the runs bucket, the
// snapshots read by key (Get, GetMany) and the reads of runs' stored tool
// results: what a restart reads.
type snapshotReads struct {
	store.Store
	scans, gets, results atomic.Int64
}

func (c *snapshotReads) ScanPrefix(b store.Bucket, prefix []byte, fn func(k, v []byte) error) error {
	if b == store.Idempotency {
		c.results.Add(1)
	}
	return c.Store.ScanPrefix(b, prefix, fn)
}

func (c *snapshotReads) Scan(b store.Bucket, fn func(k, v []byte) error) error {
	if b == store.Runs {
		c.scans.Add(1)
	}
	return c.Store.Scan(b, fn)
}

func (c *snapshotReads) Get(b store.Bucket, key []byte) ([]byte, error) {
	if b == store.Runs {
		c.gets.Add(1)
	}
	return c.Store.Get(b, key)
}

func (c *snapshotReads) GetMany(b store.Bucket, keys [][]byte, fn func(int, []byte) error) error {
	if b == store.Runs {
		c.gets.Add(int64(len(keys)))
	}
	return c.Store.GetMany(b, keys, fn)
}

// listedRuns returns the runs the store lists as unfinished, and whether
// the list says it is complete.
func listedRuns(t *testing.T, st store.Store) ([]string, bool) {
	t.Helper()
	var ids []string
	complete := false
	err := st.Scan(store.Unfinished, func(k, _ []byte) error {
		if string(k) == "\x00complete" {
			complete = true
		} else {
			ids = append(ids, string(k))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, complete
}

// A restart finds the unfinished runs through the store's list of them,
// not by reading every snapshot the store holds: a run is listed from its
// first snapshot that is not final to its final one (a resumed run again).
// A store without the list (written before it was kept) has its snapshots
// read once and the list written; an entry left for a run that has ended
// is skipped, and goes with the run at the end of its retention.
func TestRestartReadsTheListOfUnfinishedRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	ctx := context.Background()
	pol, err := policy.New(ctx, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	open := func() (*pipeline.Pipeline, *store.Bolt, *snapshotReads) {
		st := openBolt(t, dir)
		reads := &snapshotReads{Store: st}
		return pipeline.New(pipeline.Options{Policy: pol, Store: reads, Now: now, StoreRetention: 24 * time.Hour}), st, reads
	}
	var live []string
	p, st, _ := open()
	for i := range 10 {
		live = append(live, fmt.Sprintf("r-live-%02d", i))
		step(p, &pipeline.Call{Body: taskBody, RunID: live[i]}, toolResponse)
	}
	for i := range 30 {
		step(p, &pipeline.Call{Body: taskBody, RunID: fmt.Sprintf("r-done-%02d", i)}, finalResponse)
	}
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-capped", RunBudget: "max_steps=1"}, toolResponse)
	if turn := step(p, &pipeline.Call{Body: taskBody, RunID: "r-capped"}, toolResponse); turn.Answer == nil {
		t.Fatal("setup: the second step of a max_steps=1 run was forwarded")
	}
	if ids, complete := listedRuns(t, st); !slices.Equal(ids, live) || complete {
		t.Fatalf("listed before a restart: %v (complete: %v), want %v", ids, complete, live)
	}
	// This store has had no restart, as one written before the list was
	// kept: its first reads every snapshot.
	st.Close()
	p, st, reads := open()
	if n, err := p.Restore(ctx); n != 10 || err != nil {
		t.Fatalf("first restart: %d runs, %v", n, err)
	}
	if reads.scans.Load() != 1 {
		t.Fatalf("first restart: %d scans of the snapshots, want 1", reads.scans.Load())
	}
	if ids, complete := listedRuns(t, st); !slices.Equal(ids, live) || !complete {
		t.Fatalf("listed after the first restart: %v (complete: %v)", ids, complete)
	}
	// One run ends, one ended run is resumed, and an entry is left for a
	// run that has ended (as the first listing can leave one).
	step(p, &pipeline.Call{Body: taskBody, RunID: live[0]}, finalResponse)
	rec, _, _ := p.Record("r-capped")
	if _, err := p.Resume("r-capped", rec.ResumeToken, accounting.Budget{Vector: accounting.Vector{Steps: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := <-st.Apply([]store.Op{{Bucket: store.Unfinished, Key: []byte("r-done-00"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	want := append([]string{"r-capped", "r-done-00"}, live[1:]...)
	if ids, _ := listedRuns(t, st); !slices.Equal(ids, want) {
		t.Fatalf("listed: %v, want %v", ids, want)
	}
	st.Close()
	p, st, reads = open()
	if n, err := p.Restore(ctx); n != 10 || err != nil {
		t.Fatalf("second restart: %d runs, %v", n, err)
	}
	if reads.scans.Load() != 0 || reads.gets.Load() != 11 || reads.results.Load() != 0 {
		t.Fatalf("second restart: %d scans of the snapshots, %d read by key, %d reads of stored tool results (none made a tool call); want 0, 11, 0",
			reads.scans.Load(), reads.gets.Load(), reads.results.Load())
	}
	if p.Runs().Get("r-capped") == nil || p.Runs().Get("r-done-00") != nil || p.Runs().Get(live[0]) != nil {
		t.Fatal("the resumed run not rebuilt, or an ended one rebuilt")
	}
	clock = clock.Add(48 * time.Hour)
	if n, err := p.SweepStored(true); err != nil || n < 30 {
		t.Fatalf("retention sweep: %d runs deleted, %v", n, err)
	}
	if ids, _ := listedRuns(t, st); slices.Contains(ids, "r-done-00") {
		t.Fatalf("an ended run's entry outlived the run: %v", ids)
	}
}

// A long run keeps only its newest lineage keys indexed in memory; an
// older one (a request echoing an earlier turn) still finds the run,
// through the store.
func TestLongRunLineageLeavesMemory(t *testing.T) {
	t.Parallel()
	p, _ := boltPipeline(t, t.TempDir(), time.Now)
	const run, steps = "r-lineage", 40
	for k := range steps {
		step(p, &pipeline.Call{Body: agentStep(run, k), RunID: run}, string(agentAnswer(run, k, steps+1)))
	}
	held := 0
	p.Runs().LineageKeys(func(_, id string) {
		if id == run {
			held++
		}
	})
	if held == 0 || held > 32 {
		t.Fatalf("%d lineage keys of the run in memory after %d steps", held, steps)
	}
	// A request whose last assistant turn is step 3's, without a run id.
	if turn := step(p, &pipeline.Call{Body: agentStep(run, 4)}, string(agentAnswer(run, 4, steps+1))); turn.RunID() != run {
		t.Fatalf("an early turn's tool call id found run %q", turn.RunID())
	}
}

// BenchmarkRecordsFromStore is the admin run list over 2,000 ended runs
// that left memory (read from the bbolt store), newest 50.
func BenchmarkRecordsFromStore(b *testing.B) {
	clock := time.Unix(1_800_000_000, 0)
	p, _ := boltPipeline(b, b.TempDir(), func() time.Time { return clock })
	const runs, steps = 2000, 3
	for i := range runs {
		id := fmt.Sprintf("r-list-%04d", i)
		for k := range steps {
			step(p, &pipeline.Call{Body: agentStep(id, k), RunID: id}, string(agentAnswer(id, k, steps)))
		}
		clock = clock.Add(time.Millisecond)
	}
	clock = clock.Add(time.Hour)
	if p.SweepEnded(); p.Runs().Get("r-list-0000") != nil {
		b.Fatal("setup: the runs stayed in memory")
	}
	b.ReportAllocs()
	for b.Loop() {
		recs, err := p.Records(runstate.Filter{Limit: 50})
		if err != nil || len(recs) != 50 || recs[0].ID != "r-list-1999" {
			b.Fatalf("%d records (first %s), %v", len(recs), recs[0].ID, err)
		}
	}
}

// A call's hold on its budget reaches the store without a write of its own
// (it rides on the next commit, store.Store.Later), and a run's first call
// goes to the provider before the new run is written (its Finish writes
// it, or SaveUnsaved past a millisecond); both survive a crash once a
// millisecond has passed: the restarted gateway has the new run. The
// holds died with the process whose calls they were: the restart gives
// them back at once (no lease is left to run out), each run records it,
// the run left deciding is ready again, and the next call is the step
// after the completed ones, with the budget the completed ones leave.
func TestInFlightCallsSurviveACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	p, st := boltPipeline(t, dir, now)
	call := func(run string, k int) *pipeline.Call {
		return &pipeline.Call{Body: agentStep(run, k), RunID: run, RunBudget: "max_steps=10,max_tokens=100000"}
	}
	const older, fresh = "r-second-call", "r-first-call"
	if turn := step(p, call(older, 0), string(agentAnswer(older, 0, 4))); turn.Answer != nil {
		t.Fatalf("refused: %s", turn.Answer.Body)
	}
	// No Finish: both calls are in flight when the process dies.
	for _, c := range []*pipeline.Call{call(older, 1), call(fresh, 0)} {
		if turn := p.Begin(context.Background(), c, openai.Chat{}); turn.Answer != nil {
			t.Fatalf("refused: %s", turn.Answer.Body)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		st.Scan(store.Reservations, func(_, _ []byte) error { n++; return nil })
		v, _ := st.Get(store.Runs, []byte(fresh))
		if n == 2 && v != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s the store holds %d holds and the new run: %v", n, v != nil)
		}
		time.Sleep(time.Millisecond)
	}
	crashed := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	p2, st2 := boltPipeline(t, crashed, now)
	if _, err := p2.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p2.Runs().Get(fresh) == nil {
		t.Fatal("the run whose first call was in flight did not come back")
	}
	holds := 0
	st2.Scan(store.Reservations, func(_, _ []byte) error { holds++; return nil })
	if n := p2.SweepLeases(); n != 0 || holds != 0 {
		t.Fatalf("after the restart, %d holds of the dead process were still held (%d in the store)", n, holds)
	}
	// The older run was last written as its first step asked for a tool
	// (the call after it is not written until it ends); the new one was
	// written while its first call was in flight, deciding.
	after := map[string]struct {
		steps int64
		state runstate.State
	}{older: {1, runstate.ExecutingTools}, fresh: {0, runstate.Ready}}
	for run, want := range after {
		rec, ok, err := p2.Record(run)
		if err != nil || !ok || rec.AgentSteps != want.steps || rec.Status != want.state {
			t.Fatalf("%s after the restart: %+v (%v, %v), want %d steps, %s", run, rec, ok, err, want.steps, want.state)
		}
		events, _, err := p2.Events(run)
		if err != nil {
			t.Fatal(err)
		}
		released := slices.IndexFunc(events, func(e runstate.Event) bool {
			return e.Type == pipeline.EventReleasedAfterRestart && strings.Contains(e.Detail, "1 call(s) in flight") &&
				strings.Contains(e.Detail, "steps=1;")
		})
		if released < 0 {
			t.Fatalf("%s recorded no release of its call's hold: %+v", run, events)
		}
	}
	// The next call is the step after the completed ones, and what is left
	// of the budget is what the completed calls leave.
	for run, k := range map[string]int{older: 1, fresh: 0} {
		turn := step(p2, call(run, k), string(agentAnswer(run, k, 4)))
		if turn.Answer != nil {
			t.Fatalf("refused: %s", turn.Answer.Body)
		}
		hdr := map[string]string{}
		p2.Headers(turn, func(k, v string) { hdr[k] = v })
		done := int64(k + 1)
		// The default policy's deadline follows (the clock stands still).
		want := fmt.Sprintf("steps=%d;tokens=%d;time_ms=1800000", 10-done, 100000-918*done)
		if hdr[pipeline.HeaderRunStep] != fmt.Sprint(done) || hdr[pipeline.HeaderBudgetRemaining] != want {
			t.Fatalf("%s: next call after the restart: step %s, remaining %q; want step %d, %q",
				run, hdr[pipeline.HeaderRunStep], hdr[pipeline.HeaderBudgetRemaining], done, want)
		}
	}
}

// A hold this process made is live in its book: a restore on its own
// store leaves it held and in the store, and its run records nothing.
func TestRestoreKeepsTheHoldsOfItsOwnCalls(t *testing.T) {
	t.Parallel()
	p, st := boltPipeline(t, t.TempDir(), time.Now)
	ctx := context.Background()
	turn := p.Begin(ctx, &pipeline.Call{Body: taskBody, RunID: "r-live"}, openai.Chat{})
	if turn.Answer != nil {
		t.Fatalf("refused: %s", turn.Answer.Body)
	}
	holds := func() int {
		n := 0
		st.Scan(store.Reservations, func(_, _ []byte) error { n++; return nil })
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for holds() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("after 5 s the call's hold is not in the store")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := p.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holds(); n != 1 {
		t.Fatalf("the restore left %d holds in the store, want the call's", n)
	}
	events, _, _ := p.Events("r-live")
	if slices.ContainsFunc(events, func(e runstate.Event) bool { return e.Type == pipeline.EventReleasedAfterRestart }) {
		t.Fatalf("a live call's hold was recorded as released: %+v", events)
	}
	p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(toolResponse)})
}
