package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

// agentStep builds step k of run: the task and the k tool calls and
// distinct results so far, as an agent re-sends its history.
func agentStep(run string, k int) []byte { return appendAgentStep(nil, run, k) }

// appendAgentStep appends agentStep's body to dst (with room, no
// allocation: a benchmark that makes new bodies as it goes leaves the
// collector no garbage of its own).
func appendAgentStep(dst []byte, run string, k int) []byte {
	dst = append(dst, `{"model":"gpt-4o-mini","max_tokens":512,"tools":[{"type":"function","function":{"name":"search_orders","parameters":{"type":"object","properties":{"page":{"type":"integer"}}}}}],"messages":[{"role":"system","content":"`...)
	dst = append(dst, systemPrompt...)
	dst = append(dst, `"},{"role":"user","content":"Find the open orders of customer 4711."}`...)
	for j := range k {
		dst = append(append(dst, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_`...), run...)
		dst = strconv.AppendInt(append(dst, '_'), int64(j), 10)
		dst = strconv.AppendInt(append(dst, `","type":"function","function":{"name":"search_orders","arguments":"{\"page\":`...), int64(j), 10)
		dst = append(append(dst, `}"}}]},{"role":"tool","tool_call_id":"call_`...), run...)
		dst = strconv.AppendInt(append(dst, '_'), int64(j), 10)
		dst = strconv.AppendInt(append(dst, `","content":"page `...), int64(j), 10)
		dst = strconv.AppendInt(append(dst, `: order `...), int64(1000+37*j), 10)
		dst = append(dst, ` shipped"}`...)
	}
	return append(dst, `]}`...)
}

var systemPrompt = strings.Repeat("You are the order desk assistant. ", 40)

// agentAnswer is the model's answer to step k of steps: a tool call, or the
// final answer at the last step.
func agentAnswer(run string, k, steps int) []byte { return appendAgentAnswer(nil, run, k, steps) }

// appendAgentAnswer appends agentAnswer's body to dst.
func appendAgentAnswer(dst []byte, run string, k, steps int) []byte {
	if k == steps-1 {
		return append(dst, finalResponse...)
	}
	dst = append(append(dst, `{"id":"chatcmpl-`...), run...)
	dst = strconv.AppendInt(append(dst, '-'), int64(k), 10)
	dst = append(append(dst, `","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_`...), run...)
	dst = strconv.AppendInt(append(dst, '_'), int64(k), 10)
	dst = strconv.AppendInt(append(dst, `","type":"function","function":{"name":"search_orders","arguments":"{\"page\":`...), int64(k), 10)
	return append(dst, `}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":18,"total_tokens":918}}`...)
}

// BenchmarkAgentLoopPersisted is the per-call cost of the load harness's
// workload inside the gateway, without network: 1,024 runs of 4 steps in
// flight, each step continuing its run by X-Run-Id with its history and tool
// results, every change committed to the embedded store (log + checkpoints).
func BenchmarkAgentLoopPersisted(b *testing.B) { agentLoop(b, nil, false) }

// BenchmarkAgentLoopLineage is BenchmarkAgentLoopPersisted without
// X-Run-Id, the path of an agent left unchanged: each run's first call
// starts a run the gateway names, its later calls are found by the tool
// calls they echo.
func BenchmarkAgentLoopLineage(b *testing.B) { agentLoop(b, nil, true) }

// BenchmarkAgentLoopColdCache is BenchmarkAgentLoopPersisted with the
// CPU's caches emptied of the gateway before each call, as they are at
// 1,000 calls/s, where the core idles or runs the upstream between calls:
// there Begin and Finish took 3–4 times their in-process time, every stage
// alike, and that regime decides the harness's p50
// at 1,000 req/s. Writing coldCacheBytes between calls evicts the L1 and
// L2 caches (48 KiB and 2 MiB a core on the development machine), which
// reproduces about half of it (twice the warm time); the rest, the
// last-level cache and the TLB lost to the host's other guests, a
// benchmark cannot take from itself. µs/call is the calls' own time, the
// eviction left out.
func BenchmarkAgentLoopColdCache(b *testing.B) {
	evict := make([]byte, coldCacheBytes)
	agentLoop(b, func() {
		for i := 0; i < len(evict); i += 64 {
			evict[i]++
		}
	}, false)
}

// coldCacheBytes is what BenchmarkAgentLoopColdCache writes between calls:
// twice the development machine's L2 cache a core.
const coldCacheBytes = 4 << 20

// agentLoop runs the harness's workload through a pipeline over the
// embedded store; evict, when set, runs before each call and is not timed;
// with lineage the calls carry no run id.
func agentLoop(b *testing.B, evict func(), lineage bool) {
	p, st := persistedPipeline(b, store.BoltOptions{})
	const slots, steps = 1024, 4
	type req struct {
		run  string
		body []byte
		resp []byte
	}
	// Bodies are built ahead: building them is the agent's work, not ours.
	reqs := make([]req, 8*steps*slots)
	// build makes (or makes again, in place) the bodies of 8 generations.
	build := func(suffix string) {
		for i := range reqs {
			s, k, gen := i%slots, i/slots%steps, i/(slots*steps)
			run := fmt.Sprintf("bench-%d-%d%s", s, gen, suffix)
			reqs[i] = req{run, appendAgentStep(reqs[i].body[:0], run, k), appendAgentAnswer(reqs[i].resp[:0], run, k, steps)}
		}
	}
	if lineage {
		build("g0000") // a suffix of one length: bodies made again fit in place
	} else {
		build("")
	}
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := processCPU()
	i := 0
	var calls time.Duration // with evict: the calls' own time
	var building time.Duration
	for b.Loop() {
		if i > 0 && i%len(reqs) == 0 {
			b.StopTimer() // a new generation of runs
			if lineage {
				// The tool calls echoed name the runs: new ones, new bodies
				// (not the gateway's CPU).
				cpu := processCPU()
				build(fmt.Sprintf("g%04d", i/len(reqs)))
				building += processCPU() - cpu
			} else {
				for j := range reqs {
					reqs[j].run += "x"
				}
			}
			b.StartTimer()
		}
		r := reqs[i%len(reqs)]
		i++
		var start time.Time
		if evict != nil {
			evict()
			start = time.Now()
		}
		call := &pipeline.Call{Body: r.body, RunID: r.run}
		if lineage {
			call.RunID = ""
		}
		t := p.Begin(ctx, call, openai.Chat{})
		if t.Answer != nil {
			b.Fatalf("refused: %s", t.Answer.Body)
		}
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: r.resp})
		if evict != nil {
			calls += time.Since(start)
		}
	}
	// Each commit is a write(2) to the log on the call's path.
	b.ReportMetric(float64(st.Commits())/float64(b.N), "commits/call")
	// The process's CPU time, background work (checkpoints, the
	// collector) included, and a VM's stolen time not: steadier than ns/op
	// on a shared machine.
	if evict != nil {
		// The eviction's CPU is most of the process's: the calls' own
		// time stands instead.
		b.ReportMetric(float64(calls.Microseconds())/float64(b.N), "µs/call")
		return
	}
	b.ReportMetric(float64((processCPU()-cpu0-building).Microseconds())/float64(b.N), "cpu-µs/call")
}

// processCPU is the user and system time of the whole process.
func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMemoryPerEvent measures what one more event of a run costs: in
// memory (the run's timeline), and in the embedded store (bytes of its
// record in the log, before the checkpoint). A step of an agent loop
// records several events (state changes, the model call, its tool calls).
func BenchmarkMemoryPerEvent(b *testing.B) {
	const runs, steps = 200, 20
	p, st := persistedPipeline(b, store.BoltOptions{CheckpointEvery: time.Hour})
	ctx := context.Background()
	step := func(run string, k int) {
		t := p.Begin(ctx, &pipeline.Call{Body: agentStep(run, k), RunID: run}, openai.Chat{})
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: agentAnswer(run, k, steps+1)})
	}
	for r := range runs { // the runs exist, with a first step each
		step(fmt.Sprintf("mem-%d", r), 0)
	}
	count := func() (events, stored int) {
		for r := range runs {
			evs, _, err := p.Events(fmt.Sprintf("mem-%d", r))
			if err != nil {
				b.Fatal(err)
			}
			events += len(evs)
		}
		err := st.Scan(store.Events, func(_, v []byte) error { stored += len(v); return nil })
		if err != nil {
			b.Fatal(err)
		}
		return events, stored
	}
	ev0, st0 := count()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for k := 1; k < steps; k++ {
		for r := range runs {
			step(fmt.Sprintf("mem-%d", r), k)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	ev1, st1 := count()
	for b.Loop() {
	}
	n := float64(ev1 - ev0)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/event")
	b.ReportMetric(float64(st1-st0)/n, "stored-B/event")
	b.ReportMetric(n/float64(runs*(steps-1)), "events/step")
}

// BenchmarkMemoryPerLongRun reports the heap a live run holds after 100
// agent steps (over 300 events) with the embedded store, checkpointed as
// it runs: with a store only its newest events stay in memory.
func BenchmarkMemoryPerLongRun(b *testing.B) {
	const runs, steps = 100, 100
	// Checkpointed often, so that what the heap holds is the runs, not
	// writes waiting for bbolt.
	p, _ := persistedPipeline(b, store.BoltOptions{CheckpointEvery: 10 * time.Millisecond})
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for k := range steps {
		for r := range runs {
			run := fmt.Sprintf("long-%d", r)
			t := p.Begin(ctx, &pipeline.Call{Body: agentStep(run, k), RunID: run}, openai.Chat{})
			p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: agentAnswer(run, k, steps+1)})
		}
	}
	time.Sleep(100 * time.Millisecond) // the last checkpoint
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The whole timeline is still there, from its first event.
	evs, _, err := p.Events("long-0")
	if n := len(evs); err != nil || n < 3*steps || evs[0].Seq != 1 || evs[n-1].Seq != int64(n) {
		b.Fatalf("timeline of a long run: %d events, %v", n, err)
	}
	for b.Loop() {
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/runs, "heap-B/run")
}

// harnessCalls returns a function that makes the next call of the
// harness's workload (1,024 runs of 4 steps in flight) through p.
func harnessCalls(b *testing.B, p *pipeline.Pipeline) func() { return agentCalls(b, p, false) }

// agentCalls makes harnessCalls' calls; with lineage they carry no run id:
// each run's first call starts a run the gateway names, and its later
// calls are found by the tool call ids they echo (a step that lands
// elsewhere fails the benchmark).
func agentCalls(b *testing.B, p *pipeline.Pipeline, lineage bool) func() {
	const slots, steps = 1024, 4
	ctx := context.Background()
	n := 0
	ids := make([]string, slots) // each slot's run, as the gateway named it
	return func() {
		gen, k, s := n/(slots*steps), n/slots%steps, n%slots
		n++
		run := fmt.Sprintf("ck-%d-%d", s, gen)
		call := &pipeline.Call{Body: agentStep(run, k), RunID: run}
		if lineage {
			call.RunID = ""
		}
		t := p.Begin(ctx, call, openai.Chat{})
		if t.Answer != nil {
			b.Fatalf("refused: %s", t.Answer.Body)
		}
		if k == 0 {
			ids[s] = t.RunID()
		} else if t.RunID() != ids[s] {
			b.Fatalf("step %d of %s went to run %s, not %s", k, run, t.RunID(), ids[s])
		}
		p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: agentAnswer(run, k, steps)})
	}
}

// BenchmarkCheckpointPerCall is the checkpoint's CPU time per call of the
// harness's workload (1,024 runs of 4 steps in flight) for checkpoints
// every 2,000 and every 8,000 calls — at 1,000 calls/s, the default 2 s
// period and an 8 s one: the longer the window, the more of a run's
// rewrites collapse into one key and its events into one page.
func BenchmarkCheckpointPerCall(b *testing.B) {
	for _, window := range []int{2000, 8000} {
		b.Run(fmt.Sprint(window), func(b *testing.B) {
			p, st := persistedPipeline(b, store.BoltOptions{CheckpointEvery: time.Hour, CheckpointOps: 1 << 30})
			measureCheckpoints(b, st, harnessCalls(b, p), window, 16_000)
		})
	}
}

// BenchmarkCheckpointWithHistory is BenchmarkCheckpointPerCall's 8,000-call
// window over a store holding 128,000 earlier calls (about two minutes at
// 1,000 calls/s; the store keeps a month), where a checkpoint's rewrites
// meet a tree of many pages: once with run ids chosen by the agent
// (X-Run-Id, as the load harness sends them: "<tag>-<slot>-<gen>"), once
// with runs found by lineage, whose ids the gateway makes. It reports the
// pages a checkpoint writes per call beside its CPU time.
func BenchmarkCheckpointWithHistory(b *testing.B) {
	for _, ids := range []string{"x-run-id", "lineage"} {
		b.Run(ids, func(b *testing.B) {
			p, st := persistedPipeline(b, store.BoltOptions{CheckpointEvery: time.Hour, CheckpointOps: 1 << 30})
			measureCheckpoints(b, st, agentCalls(b, p, ids == "lineage"), 8000, 128_000)
		})
	}
}

// measureCheckpoints makes history calls, checkpointing every window, then
// per iteration window calls and a checkpoint, whose CPU (it runs in this
// goroutine, on this locked thread) and bbolt pages written it reports per
// call.
func measureCheckpoints(b *testing.B, st *store.Bolt, call func(), window, history int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range history / window {
		for range window {
			call()
		}
		if err := st.Checkpoint(); err != nil {
			b.Fatal(err)
		}
	}
	var cpu time.Duration
	var pages int64
	calls := 0
	for b.Loop() {
		for range window {
			call()
		}
		before, written := threadCPU(), st.PagesWritten()
		if err := st.Checkpoint(); err != nil {
			b.Fatal(err)
		}
		cpu += threadCPU() - before
		pages += st.PagesWritten() - written
		calls += window
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(calls), "ckpt-cpu-µs/call")
	b.ReportMetric(float64(pages)/float64(calls), "pages/call")
}

// threadCPU is the calling thread's user and system time: with the
// thread locked, the checkpoint's own (it runs in the caller).
func threadCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReopenAfterCrash is a restart's opening of the embedded store
// left by a process killed 4,000 harness calls after its last checkpoint
// (2 s at 2,000 calls/s), over a file holding 16,000 calls: the log's
// replay into bbolt, then the new log. Each iteration opens a copy of the
// directory taken while the store was open, as a kill leaves it.
func BenchmarkReopenAfterCrash(b *testing.B) {
	dir := b.TempDir()
	p, st := persistedPipelineIn(b, dir, store.BoltOptions{CheckpointEvery: time.Hour, CheckpointOps: 1 << 30})
	call := harnessCalls(b, p)
	for range 16_000 {
		call()
	}
	if err := st.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	for range 4_000 {
		call()
	}
	for b.Loop() {
		b.StopTimer()
		crashed := filepath.Join(b.TempDir(), "data")
		if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		reopened, err := store.OpenBolt(crashed)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		reopened.Close()
		b.StartTimer()
	}
}

// BenchmarkRestoreAfterLoad is the restore a restart with the embedded
// store does (pipeline.Restore: reservations, team windows, then the
// unfinished runs, which a gateway rebuilds once it serves), over a
// store like the one the load harness's
// saturation search leaves: 21,504 runs of the harness's workload, a third
// of them left after their second step (unfinished, as an agent's that
// went away), the rest ended. Opening the store and compiling the policy
// are the rest of a cold start and are not counted; restored runs are
// checked. listed: the unfinished runs found through the store's list of
// them; unlisted: the first restart of a store written before the list
// was kept, which reads every snapshot and writes the list.
func BenchmarkRestoreAfterLoad(b *testing.B) {
	const slots, steps, gens = 1024, 4, 21
	dir := b.TempDir()
	p, st := persistedPipelineIn(b, dir, store.BoltOptions{CheckpointEvery: time.Hour, CheckpointOps: 1 << 30})
	ctx := context.Background()
	unfinished := 0
	for gen := range gens {
		for k := range steps {
			for s := range slots {
				if s%3 == 0 && k >= 2 {
					continue // this run's agent went away
				}
				run := fmt.Sprintf("rs-%d-%d", s, gen)
				t := p.Begin(ctx, &pipeline.Call{Body: agentStep(run, k), RunID: run}, openai.Chat{})
				if t.Answer != nil {
					b.Fatalf("refused: %s", t.Answer.Body)
				}
				p.Finish(ctx, t, pipeline.Outcome{Status: 200, Body: agentAnswer(run, k, steps)})
			}
		}
		unfinished += (slots + 2) / 3
	}
	p.SaveUnsaved()
	if err := st.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	st.Close()
	pol, err := policy.New(ctx, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	// A first restart completes the list.
	first, err := store.OpenBolt(dir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pipeline.New(pipeline.Options{Policy: pol, Store: first}).Restore(ctx); err != nil {
		b.Fatal(err)
	}
	first.Close()
	for _, listed := range []bool{true, false} {
		b.Run(map[bool]string{true: "listed", false: "unlisted"}[listed], func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				reopened, err := store.OpenBolt(dir)
				if err != nil {
					b.Fatal(err)
				}
				// The list: complete, or gone as from an older version.
				var ops []store.Op
				err = reopened.Scan(store.Unfinished, func(k, _ []byte) error {
					ops = append(ops, store.Op{Bucket: store.Unfinished, Key: bytes.Clone(k)})
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if listed && len(ops) != unfinished+1 {
					b.Fatalf("%d runs listed, want %d and the list's end", len(ops)-1, unfinished)
				}
				if !listed && len(ops) > 0 {
					if err := <-reopened.Apply(ops); err != nil {
						b.Fatal(err)
					}
				}
				restarted := pipeline.New(pipeline.Options{Policy: pol, Store: reopened})
				runtime.GC() // the last round's runs are garbage: not this round's work
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				b.StartTimer()
				n, err := restarted.Restore(ctx)
				b.StopTimer()
				if err != nil || n != unfinished {
					b.Fatalf("restored %d runs of %d: %v", n, unfinished, err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/run")
				runtime.KeepAlive(restarted)
				reopened.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkStoredBytesPerCall measures what the harness's workload leaves
// on disk in the embedded store: the data directory's size after the
// calls, closed (checkpointed: the log absorbed into the bbolt file),
// divided by the calls. It sizes a data directory: bytes a call times
// calls a day times store.retention. Runs, events, ledgers and lineage
// keys are all in it; recordings are off, as by default.
func BenchmarkStoredBytesPerCall(b *testing.B) {
	dir := b.TempDir()
	p, st := persistedPipelineIn(b, dir, store.BoltOptions{})
	call := harnessCalls(b, p)
	for b.Loop() {
		call()
	}
	b.StopTimer()
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			size += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(size)/float64(b.N), "disk-B/call")
}
