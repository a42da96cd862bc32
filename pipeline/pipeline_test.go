package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

func newPipeline(t testing.TB, now func() time.Time, lease time.Duration) *pipeline.Pipeline {
	t.Helper()
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return pipeline.New(pipeline.Options{Policy: pol, Now: now, Lease: lease})
}

// chatBody builds a chat request of about size bytes: a task and a history
// of tool calls with long results, as agents send.
func chatBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o-mini","max_completion_tokens":500,"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"Do the task."}`)
	for i := 0; b.Len() < size-400; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read","arguments":"{\"page\":%d}"}}]}`, i, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%q}`, i, strings.Repeat("lorem ipsum ", 80))
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`)
	return []byte(b.String())
}

const finalResponse = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020}}`

// A reservation whose call never comes back is released by its lease, so the
// run's budget is whole again.
func TestLeaseReleasesAbandonedReservation(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	p := newPipeline(t, now, time.Minute)
	call := &pipeline.Call{Body: chatBody(2000), RunID: "r-lease", RunBudget: "max_cost_usd=1"}
	turn := p.Begin(context.Background(), call, openai.Chat{})
	if turn.Answer != nil {
		t.Fatalf("refused: %s", turn.Answer.Body)
	}
	// The front end crashed: no Finish. The lease runs out.
	clock = clock.Add(2 * time.Minute)
	if n := p.SweepLeases(); n != 1 {
		t.Fatalf("swept %d reservations", n)
	}
	var hdr string
	p.Headers(turn, func(k, v string) {
		if k == pipeline.HeaderBudgetRemaining {
			hdr = v
		}
	})
	if !strings.Contains(hdr, "cost_usd=1;") && !strings.Contains(hdr, "cost_usd=1") {
		t.Fatalf("budget not whole again: %q", hdr)
	}
	// A late Finish books nothing twice and does not panic.
	p.Finish(context.Background(), turn, pipeline.Outcome{Status: 200, Body: []byte(finalResponse)})
	rec := p.Runs().Get("r-lease")
	rec.Lock()
	defer rec.Unlock()
	if rec.State != runstate.Completed || rec.Counters.InputTokens != 1000 {
		t.Fatalf("state %s tokens %d", rec.State, rec.Counters.InputTokens)
	}
}

// BenchmarkModelCall is the whole per-call path without network: parse,
// identify, admit (policy, reserve), rewrite, then settle and record from a
// non-streamed response.
func BenchmarkModelCall(b *testing.B) {
	for _, size := range []int{2 << 10, 200 << 10} {
		b.Run(fmt.Sprintf("body=%dKB", size>>10), func(b *testing.B) {
			p := newPipeline(b, nil, 0)
			body := chatBody(size)
			resp := []byte(finalResponse)
			ctx := context.Background()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				call := &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-%d", i%64)}
				t := p.Begin(ctx, call, openai.Chat{})
				p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
			}
		})
	}
}

// BenchmarkAdmitSettle isolates admission and settlement on a run that
// already exists (policy asked once per run; per call: model decision,
// reserve, settle).
func BenchmarkAdmitSettle(b *testing.B) {
	p := newPipeline(b, nil, 0)
	body := []byte(`{"model":"gpt-4o-mini","max_completion_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	resp := []byte(finalResponse)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: "r-bench", RunBudget: "max_cost_usd=1000000,max_steps=1000000000"}, openai.Chat{})
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
	}
	_ = accounting.Money(0)
}

// persistedPipeline is a pipeline with the default policies over an
// embedded store (with opts) in a temporary directory, closed with the test.
func persistedPipeline(b *testing.B, opts store.BoltOptions) (*pipeline.Pipeline, *store.Bolt) {
	return persistedPipelineIn(b, b.TempDir(), opts)
}

// persistedPipelineIn is persistedPipeline with its store in dir.
func persistedPipelineIn(b *testing.B, dir string, opts store.BoltOptions) (*pipeline.Pipeline, *store.Bolt) {
	st, err := store.OpenBoltWith(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return pipelineOver(b, st), st
}

// pipelineOver is a pipeline with the default policies over st.
func pipelineOver(tb testing.TB, st store.Store) *pipeline.Pipeline {
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return pipeline.New(pipeline.Options{Policy: pol, Store: st})
}

// BenchmarkModelCallPersisted is BenchmarkModelCall with the embedded store:
// every transition committed to the store (its log, group commit).
func BenchmarkModelCallPersisted(b *testing.B) {
	p, _ := persistedPipeline(b, store.BoltOptions{})
	body := chatBody(2 << 10)
	resp := []byte(finalResponse)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-%d-%p", i%64, pb)}, openai.Chat{})
			p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
		}
	})
}

// An ended run leaves memory after the retention when a store holds it; its
// record, its lineage (a new task in the same conversation) and its budget
// come back from the store.
func TestEndedRunsLeaveMemory(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Store: openBolt(t, t.TempDir()), Now: now, EndedRetention: time.Minute})
	ctx := context.Background()
	first := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."}]}`)
	turn := p.Begin(ctx, &pipeline.Call{Body: first, SessionID: "s-1", RunBudget: "max_steps=7"}, openai.Chat{})
	if turn.Answer != nil {
		t.Fatalf("refused: %s", turn.Answer.Body)
	}
	p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(finalResponse)})
	id := turn.RunID()
	clock = clock.Add(2 * time.Minute)
	if n := p.SweepEnded(); n != 1 || p.Runs().Get(id) != nil {
		t.Fatalf("evicted %d; still in memory: %v", n, p.Runs().Get(id) != nil)
	}
	rec, ok, err := p.Record(id)
	if err != nil || !ok || rec.AgentSteps != 1 || rec.MaxSteps != 7 || rec.Status != runstate.Completed {
		t.Fatalf("record from the store: %+v %v %v", rec, ok, err)
	}
	recs, err := p.Records(runstate.Filter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %d %v", len(recs), err)
	}
	// The conversation goes on: the echoed final answer finds the session.
	p.Runs().Remove(id, nil)
	next := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."},{"role":"assistant","content":"Done."},{"role":"user","content":"And the next one."}]}`)
	t2 := p.Begin(ctx, &pipeline.Call{Body: next}, openai.Chat{})
	p.Finish(ctx, t2, pipeline.Outcome{Status: 200, Body: []byte(finalResponse)})
	rec2, _, _ := p.Record(t2.RunID())
	if t2.RunID() == id || rec2.SessionID != "s-1" {
		t.Fatalf("new task: run %s session %q", t2.RunID(), rec2.SessionID)
	}
}

const toolResponse = `{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_x","type":"function","function":{"name":"read","arguments":"{\"page\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020}}`

// BenchmarkMemoryPerIdleRun reports the heap an idle tracked run takes
// with its governance (ledger, loop guard, policy answers), after one model
// call that left a tool call outstanding.
func BenchmarkMemoryPerIdleRun(b *testing.B) {
	const n = 20_000
	p := newPipeline(b, nil, 0)
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."}],"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`)
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-%d", i)}, openai.Chat{})
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: []byte(toolResponse)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perRun := float64(after.HeapAlloc-before.HeapAlloc) / n
	for b.Loop() {
	}
	b.ReportMetric(perRun, "heap-B/run")
}

// BenchmarkBeginNewRun is what a run's first call does before it can go to
// the provider (a stream's time to first byte pays all of it): a new run
// (policy asked, budgets ledgers made), admission, and the embedded store's
// part. Finish, outside the timer, settles it.
func BenchmarkBeginNewRun(b *testing.B) {
	p, _ := persistedPipeline(b, store.BoltOptions{})
	body := chatBody(2 << 10)
	resp := []byte(finalResponse)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: "r-new-" + strconv.Itoa(i)}, openai.Chat{})
		if t.Answer != nil {
			b.Fatalf("refused: %s", t.Answer.Body)
		}
		b.StopTimer()
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
		b.StartTimer()
	}
}

// reservationCounter is the embedded store, counting the writes of holds
// that reach its commit queue and those taken back before any commit.
type reservationCounter struct {
	*store.Bolt
	mu                sync.Mutex
	written, canceled int
}

func (c *reservationCounter) count(ops []store.Op) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, op := range ops {
		if op.Bucket == store.Reservations {
			c.written++
		}
	}
}

func (c *reservationCounter) Apply(ops []store.Op) <-chan error {
	c.count(ops)
	return c.Bolt.Apply(ops)
}
func (c *reservationCounter) Later(ops []store.Op) { c.count(ops); c.Bolt.Later(ops) }
func (c *reservationCounter) CancelLater(b store.Bucket, key []byte) bool {
	ok := c.Bolt.CancelLater(b, key)
	if ok {
		c.mu.Lock()
		c.canceled++
		c.mu.Unlock()
	}
	return ok
}

// A call that ends before its hold on the budget was committed takes the
// hold's write back instead of writing a delete after it: the log never
// sees the key. Whether a given call manages it depends on timing (its
// hold waits at most a millisecond for a commit), so the test asks only
// that some did, and that the store ends with no hold either way.
func TestQuickCallsLeaveTheirHoldUnwritten(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenBoltWith(dir, store.BoltOptions{CheckpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := &reservationCounter{Bolt: st}
	p := pipelineOver(t, c)
	ctx := context.Background()
	const runs, steps = 4, 4
	for k := range steps {
		for i := range runs {
			run := fmt.Sprintf("quick-%d", i)
			turn := p.Begin(ctx, &pipeline.Call{Body: agentStep(run, k), RunID: run}, openai.Chat{})
			if turn.Answer != nil {
				t.Fatalf("refused: %s", turn.Answer.Body)
			}
			p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: agentAnswer(run, k, steps)})
		}
	}
	p.SaveUnsaved()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	written, canceled := c.written, c.canceled
	c.mu.Unlock()
	// Each call queues its hold's write once, and a delete only when the
	// write was already taken by a commit; a hold still queued with its
	// new run is dropped before it reaches the store at all.
	if canceled == 0 {
		t.Errorf("no hold's write was taken back (%d reservation writes for %d calls)", written, runs*steps)
	}
	if written > 2*runs*steps-canceled {
		t.Errorf("%d reservation writes, %d taken back, for %d calls", written, canceled, runs*steps)
	}
	again, err := store.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	holds := 0
	if err := again.Scan(store.Reservations, func(_, _ []byte) error { holds++; return nil }); err != nil {
		t.Fatal(err)
	}
	if holds != 0 {
		t.Fatalf("%d holds left in the store after every call ended", holds)
	}
}
