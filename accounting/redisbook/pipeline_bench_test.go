package redisbook

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
	"github.com/redis/go-redis/v9"
)

const benchResponse = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020}}`

// toolCallAnswer is benchResponse asking for the tool "read" on page k,
// as call_k.
func toolCallAnswer(k int) []byte {
	return []byte(strings.Replace(benchResponse, `"content":"Done."},"finish_reason":"stop"`,
		fmt.Sprintf(`"content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read","arguments":"{\"page\":%d}"}}]},"finish_reason":"tool_calls"`, k, k), 1))
}

// gatedReplica is countedReplica with a commitGate on its client, after
// a first call on another run (warmUp).
func gatedReplica(t *testing.T) (*pipeline.Pipeline, *roundTrips, *commitGate) {
	p, rt := countedReplica(t)
	gate := &commitGate{}
	rt.book.rdb.AddHook(gate)
	warmUp(p)
	return p, rt, gate
}

// warmUp makes a call on a run of its own: the server may have to load
// the scripts again (a test flushed them), which is not a call's cost.
func warmUp(p *pipeline.Pipeline) {
	ctx := context.Background()
	warm := p.Begin(ctx, &pipeline.Call{Body: benchBody(), RunID: "r-warm"}, openai.Chat{})
	p.Finish(ctx, warm, pipeline.Outcome{Status: 200, Body: []byte(benchResponse)})
}

func benchBody() []byte {
	return []byte(`{"model":"gpt-4o-mini","max_completion_tokens":500,"messages":[{"role":"user","content":"` +
		strings.Repeat("lorem ipsum ", 160) + `"}]}`)
}

// benchPersistence measures one governed model call (Begin + Finish, no
// network to the model) with the given book and store, from several
// goroutines: what persistence costs per call.
func benchPersistence(b *testing.B, book accounting.Book, st store.Store, lock pipeline.RunLock) {
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: lock})
	body, resp := benchBody(), []byte(benchResponse)
	ctx := context.Background()
	prefix := fmt.Sprintf("r%d-", time.Now().UnixNano())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			// 50 steps per run, under the default limit of 100 steps.
			t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("%s%d-%p", prefix, i/50, pb)}, openai.Chat{})
			if t.Answer != nil {
				b.Errorf("refused: %s", t.Answer.Body)
				return
			}
			p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
		}
	})
}

// BenchmarkPersistencePerCall compares the cost of persistence per call:
// memory only, the embedded bbolt store, and Redis (shared book, store and
// run locks, as several replicas run).
func BenchmarkPersistencePerCall(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchPersistence(b, nil, nil, nil) })
	b.Run("bbolt", func(b *testing.B) {
		st, err := store.OpenBolt(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		benchPersistence(b, nil, st, nil)
	})
	b.Run("redis", func(b *testing.B) {
		book, st := openOne(b)
		benchPersistence(b, book, st, RunLock[store.Op]{Locker: st, Book: book})
	})
}

// BenchmarkRestoreFromRedis is a replica's restart on a Redis store that
// holds 4,000 unfinished runs: it reads them through the store's list of
// unfinished runs, a round trip a batch of store.GetManyBatch snapshots.
func BenchmarkRestoreFromRedis(b *testing.B) {
	const runs = 4000
	book, st := openOne(b)
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	opts := pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: RunLock[store.Op]{Locker: st, Book: book}}
	p := pipeline.New(opts)
	ctx := context.Background()
	body := benchBody()
	resp := []byte(strings.Replace(benchResponse, `"content":"Done."},"finish_reason":"stop"`,
		`"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"`, 1))
	for i := range runs {
		t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-%05d", i)}, openai.Chat{})
		if t.Answer != nil {
			b.Fatalf("refused: %s", t.Answer.Body)
		}
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
	}
	if n, err := pipeline.New(opts).Restore(ctx); n != runs || err != nil { // the first completes the list
		b.Fatalf("first restart: %d runs, %v", n, err)
	}
	b.ResetTimer()
	for range b.N {
		if n, err := pipeline.New(opts).Restore(ctx); n != runs || err != nil {
			b.Fatalf("restart: %d runs, %v", n, err)
		}
	}
}

// roundTrips counts what a client sends to Redis: one a command, one a
// pipeline or MULTI/EXEC (each is one round trip), leaving out a new
// connection's handshake (HELLO, then CLIENT SETINFO pipelined).
type roundTrips struct {
	n    atomic.Int64
	book *Book // the client's
}

// countedReplica is a pipeline as one replica on Redis runs it (shared
// book, store and run locks, default policies), with its round trips
// counted.
func countedReplica(tb testing.TB) (*pipeline.Pipeline, *roundTrips) {
	tb.Helper()
	book, st := openOne(tb)
	rt := &roundTrips{book: book}
	book.rdb.AddHook(rt)
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return pipeline.New(pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: RunLock[store.Op]{Locker: st, Book: book}}), rt
}

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() != "hello" {
			c.n.Add(1)
		}
		return err
	}
}

// ProcessPipelineHook counts a round trip once it is back, so one held
// back by an inner hook (commitGate) is not counted while it waits.
func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 0 || cmds[0].Name() != "client" {
			c.n.Add(1)
		}
		return err
	}
}

// BenchmarkRedisAgentLoop is the harness's workload on one replica over
// Redis (shared book, store and run locks), one call at a time: runs of
// four steps, three answered with a tool call and the last with text. A
// call's time is mostly its round trips to Redis, each waited for in turn;
// rtt/call counts them (a command, a pipeline or a MULTI/EXEC each).
// With provider=1ms a call waits that long between Begin and Finish, as
// for a provider's answer, during which what Begin left behind it (its
// commit) lands.
func BenchmarkRedisAgentLoop(b *testing.B) {
	for _, wait := range []time.Duration{0, time.Millisecond} {
		b.Run("provider="+wait.String(), func(b *testing.B) { benchRedisAgentLoop(b, wait) })
	}
}

func benchRedisAgentLoop(b *testing.B, provider time.Duration) {
	p, rt := countedReplica(b)
	book := rt.book
	body := benchBody()
	// Each step reads another page: the same call thrice would be a loop.
	var answers [4][]byte
	for k := range 3 {
		answers[k] = toolCallAnswer(k)
	}
	answers[3] = []byte(benchResponse)
	ctx := context.Background()
	prefix := fmt.Sprintf("r%d-", time.Now().UnixNano())
	b.ReportAllocs()
	i := 0
	rt.n.Store(0)
	cpu0, rcpu0 := processCPU(), serverCPU(b, book)
	var begin, finish time.Duration
	for b.Loop() {
		resp := answers[i%4]
		t0 := time.Now()
		t := p.Begin(ctx, &pipeline.Call{Body: body, RunID: prefix + strconv.Itoa(i/4)}, openai.Chat{})
		if t.Answer != nil {
			b.Fatalf("refused: %s", t.Answer.Body)
		}
		begin += time.Since(t0)
		if provider > 0 {
			time.Sleep(provider)
		}
		t1 := time.Now()
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: resp})
		p.Headers(t, func(string, string) {})
		finish += time.Since(t1)
		i++
	}
	// Begin's time is what a call waits for before it goes to the
	// provider; Finish's, after the provider's answer, before the agent
	// has it (with provider=0s also Begin's commit, when it lands behind
	// the call: nothing hides it).
	b.ReportMetric(float64(begin.Microseconds())/float64(i), "begin-µs/call")
	b.ReportMetric(float64(finish.Microseconds())/float64(i), "finish-µs/call")
	b.ReportMetric(float64(rt.n.Load())/float64(i), "rtt/call")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(i), "cpu-µs/call")
	b.ReportMetric(float64((serverCPU(b, book)-rcpu0).Microseconds())/float64(i), "redis-cpu-µs/call")
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time the Redis server has used (INFO cpu), which a
// shared server spends for every replica.
func serverCPU(b *testing.B, book *Book) time.Duration {
	info, err := book.rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// A governed call on Redis makes at most 2 round trips on the replica
// that makes its run or moved it last, a run's first call included, and
// neither takes the run's lock: Begin's reservation (with a new run's
// ledgers made ahead of it and a stream's budget header's read) with the
// run's write, applied only if the reservation was made and no replica
// stored the run meanwhile; Finish's settlement (with the header's read)
// with the run's write, guarded so too. A call that takes the lock
// instead does not wait for Begin's commit before it goes out: the
// commit lands while the provider answers (TestBeginCommitsBehindTheCall).
func TestRedisCallRoundTrips(t *testing.T) {
	t.Parallel()
	p, rt := countedReplica(t)
	ctx := context.Background()
	warmUp(p)
	for step := range 4 {
		rt.n.Store(0)
		tn := p.Begin(ctx, &pipeline.Call{Body: benchBody(), RunID: "r-trips"}, openai.Chat{})
		if tn.Answer != nil {
			t.Fatalf("refused: %s", tn.Answer.Body)
		}
		p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: toolCallAnswer(step)})
		p.Headers(tn, func(string, string) {})
		want := int64(2)
		if n := rt.n.Load(); n > want {
			t.Errorf("step %d: %d round trips, want at most %d", step+1, n, want)
		}
	}
	// A stream, a new run's: its headers go out before its settlement, and
	// its first byte waits for 1 round trip (the reservation, with the
	// ledgers made ahead of it and the header's headroom, and the run's
	// write).
	rt.n.Store(0)
	body := bytes.Replace(benchBody(), []byte(`{"model"`), []byte(`{"stream":true,"model"`), 1)
	tn := p.Begin(ctx, &pipeline.Call{Body: body, RunID: "r-stream"}, openai.Chat{})
	if tn.Answer != nil || !tn.Req.Stream {
		t.Fatalf("stream refused (%v) or not seen: %+v", tn.Answer, tn.Req)
	}
	p.Headers(tn, func(string, string) {})
	if n := rt.n.Load(); n > 1 {
		t.Errorf("a stream's first byte waits for %d round trips, want at most 1", n)
	}
	p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Streamed: true})
}

// A new run's first call answered before it reserves still makes the
// run's ledger, which its reservation would have made (the book ignores a
// ledger it does not know, so a later reservation would bind nothing).
func TestRefusedFirstCallMakesTheLedger(t *testing.T) {
	t.Parallel()
	p, rt := countedReplica(t)
	ctx := context.Background()
	body := []byte(`{"model":"gpt-4o-mini","max_completion_tokens":5000000,"messages":[{"role":"user","content":"hi"}]}`)
	tn := p.Begin(ctx, &pipeline.Call{Body: body, RunID: "r-refused"}, openai.Chat{})
	if tn.Answer == nil || tn.Answer.Status != 400 {
		t.Fatalf("want the output cap refused, got %+v", tn.Answer)
	}
	p.Finish(ctx, tn, pipeline.Outcome{})
	if n, err := rt.book.rdb.Exists(ctx, rt.book.ledgerKey("run:r-refused")).Result(); err != nil || n != 1 {
		t.Errorf("the run's ledger: %d exist (%v), want 1 (%s)", n, err, tn.Answer.Body)
	}
}

func isSettlement(c redis.Cmder) bool {
	return c.Name() == "evalsha" && len(c.Args()) > 1 && c.Args()[1] == settleScript.Hash()
}

// isGuardedWrite reports a run's write without its lock
// (redisstore.Store.ApplyGuarded), whose first key is the run's lock.
func isGuardedWrite(c redis.Cmder) bool {
	a := c.Args()
	if c.Name() != "evalsha" || len(a) < 4 {
		return false
	}
	k, _ := a[3].(string)
	return strings.Contains(k, ":lock:run:")
}

// commitGate holds back a client's commits (MULTI/EXEC with writes, not
// the book's reads) while it is shut, and writes, in order, when each
// lock (with a settlement in its round trip or not), each settlement
// (of its own, or with a run's guarded write) and each reservation with
// a run's guarded write is sent, and when each commit has landed.
type commitGate struct {
	shut atomic.Pointer[chan struct{}]
	mu   sync.Mutex
	log  []string
}

func (g *commitGate) note(s string) {
	g.mu.Lock()
	g.log = append(g.log, s)
	g.mu.Unlock()
}

// take returns what the log holds, in order, and empties it.
func (g *commitGate) take() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := strings.Join(g.log, " ")
	g.log = nil
	return s
}

func (g *commitGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *commitGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *commitGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch {
		case len(cmds) == 0:
		case cmds[0].Name() == "multi" && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "hset" }):
			if shut := g.shut.Load(); shut != nil {
				<-*shut
			}
			err := next(ctx, cmds)
			g.note("commit")
			return err
		case cmds[0].Name() == "set":
			if slices.ContainsFunc(cmds, isSettlement) {
				g.note("lock+settle")
			} else {
				g.note("lock")
			}
		case isSettlement(cmds[0]) && slices.ContainsFunc(cmds, isGuardedWrite):
			g.note("settle+write")
		case isSettlement(cmds[0]):
			g.note("settle")
		case slices.ContainsFunc(cmds, isGuardedWrite):
			g.note("reserve+write")
		}
		return next(ctx, cmds)
	}
}

// On Redis, a call begun under the run's lock (the run another replica
// moved last) does not wait for Begin's commit (its state, with the
// lock's release): the commit lands while the provider answers, and
// Finish writes the run only once it has, so the call's own commit never
// makes its Finish's guarded write fail. Its first byte then waits for 3
// round trips (the write refused, the lock, the reservation), the commit
// not among them.
func TestBeginCommitsBehindTheCall(t *testing.T) {
	t.Parallel()
	ps, book, stores := replicas(t, 2)
	p, other := ps[0], ps[1]
	rt := &roundTrips{book: book}
	gate := &commitGate{}
	stores[0].Client().AddHook(rt)
	stores[0].Client().AddHook(gate)
	warmUp(p)
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		body := benchBody()
		if stream {
			body = bytes.Replace(body, []byte(`{"model"`), []byte(`{"stream":true,"model"`), 1)
		}
		id := fmt.Sprintf("r-behind-%v", stream)
		made := other.Begin(ctx, &pipeline.Call{Body: body, RunID: id}, openai.Chat{})
		other.Finish(ctx, made, pipeline.Outcome{Status: 200, Streamed: stream, Body: toolCallAnswer(1)})
		shut := make(chan struct{})
		gate.shut.Store(&shut)
		gate.take()
		rt.n.Store(0)
		begun := make(chan *pipeline.Turn)
		go func() { begun <- p.Begin(ctx, &pipeline.Call{Body: body, RunID: id}, openai.Chat{}) }()
		var tn *pipeline.Turn
		select {
		case tn = <-begun:
		case <-time.After(10 * time.Second):
			close(shut)
			t.Fatalf("stream %v: Begin waited for its commit", stream)
		}
		if tn.Answer != nil {
			t.Fatalf("refused: %s", tn.Answer.Body)
		}
		if stream {
			p.Headers(tn, func(string, string) {})
		}
		// The held commit is sent only once the gate opens: what Begin
		// (and a stream's headers) waited for is counted by now.
		if n := rt.n.Load(); n > 3 {
			t.Errorf("stream %v: the call went out after %d round trips, want at most 3", stream, n)
		}
		finished := make(chan struct{})
		go func() {
			p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Streamed: stream, Body: []byte(benchResponse)})
			close(finished)
		}()
		// Time for a Finish that did not wait to send its lock.
		time.Sleep(50 * time.Millisecond)
		gate.shut.Store(nil)
		close(shut)
		<-finished
		log := gate.take()
		// Begin's write refused (the run is stored), its lock, its commit,
		// Finish's settlement with the run's guarded write.
		if log != "reserve+write lock commit settle+write" {
			t.Errorf("stream %v: locks and commits in the order %q, want Finish's guarded write after Begin's commit", stream, log)
		}
	}
}

// On Redis, on the replica that moved the run last, Finish's settlement
// and the run's write go out in one round trip, the write guarded by the
// stored run (a settlement needs no lock): Finish waits for 1 round
// trip, after Begin's commit when Begin made one.
func TestFinishSettlesWithItsGuardedWrite(t *testing.T) {
	t.Parallel()
	p, rt, gate := gatedReplica(t)
	ctx := context.Background()
	for step := range 2 {
		tn := p.Begin(ctx, &pipeline.Call{Body: benchBody(), RunID: "r-riding"}, openai.Chat{})
		if tn.Answer != nil {
			t.Fatalf("refused: %s", tn.Answer.Body)
		}
		gate.take()
		rt.n.Store(0)
		p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: toolCallAnswer(step)})
		n := rt.n.Load()
		log := gate.take()
		// Begin's commit lands behind the call: Finish waits for it first.
		if !strings.HasSuffix(log, "settle+write") || strings.Contains(log, "lock") {
			t.Errorf("step %d: Finish sent %q, want its settlement with its guarded write", step+1, log)
		}
		if n > 2 {
			t.Errorf("step %d: Finish made %d round trips, want at most 2 (Begin's commit, the settlement with the guarded write)", step+1, n)
		}
		var remaining string
		p.Headers(tn, func(k, v string) {
			if k == pipeline.HeaderBudgetRemaining {
				remaining = v
			}
		})
		if remaining == "" {
			t.Errorf("step %d: no budget header after a settlement read with the guarded write", step+1)
		}
	}
}

// A tool call on Redis lets go of the run's lock in its commits too, as a
// model call does: BeginTool's commit lands while the tool answers and
// FinishTool's carries the release. A tool call took 6 round trips (a
// lock, a commit and an unlock each side); now at most 4, and BeginTool
// waits for 1, its lock, before the call goes to the tool.
func TestRedisToolCallRoundTrips(t *testing.T) {
	t.Parallel()
	p, rt, gate := gatedReplica(t)
	ctx := context.Background()
	tn := p.Begin(ctx, &pipeline.Call{Body: benchBody(), RunID: "r-tool"}, openai.Chat{})
	if tn.Answer != nil {
		t.Fatalf("refused: %s", tn.Answer.Body)
	}
	p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: toolCallAnswer(1)})
	for i := range 2 {
		shut := make(chan struct{})
		gate.shut.Store(&shut)
		rt.n.Store(0)
		begun := make(chan *pipeline.ToolTurn)
		go func() {
			begun <- p.BeginTool(ctx, &pipeline.ToolCall{Name: "read", Arguments: fmt.Appendf(nil, `{"page":%d}`, i+1), RunID: "r-tool"})
		}()
		var tt *pipeline.ToolTurn
		select {
		case tt = <-begun:
		case <-time.After(10 * time.Second):
			close(shut)
			t.Fatalf("tool call %d: BeginTool waited for its commit", i+1)
		}
		if tt.Answer != nil {
			t.Fatalf("tool call %d answered by the gateway: %+v", i+1, tt.Answer)
		}
		if n := rt.n.Load(); n > 1 {
			t.Errorf("tool call %d went to the tool after %d round trips, want 1", i+1, n)
		}
		gate.shut.Store(nil)
		close(shut)
		p.FinishTool(ctx, tt, pipeline.ToolOutcome{Text: "page text"})
		if n := rt.n.Load(); n > 4 {
			t.Errorf("tool call %d: %d round trips, want at most 4", i+1, n)
		}
	}
}
