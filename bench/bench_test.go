package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// mainEnv makes the test binary run the harness itself: the short-mode test
// runs it as a subprocess so that its pinning and its children (started
// again from this binary, see roleEnv) never touch the test process.
const mainEnv = "HALTLINE_BENCH_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		main()
		os.Exit(0)
	}
	if os.Getenv(mainEnv) == "1" {
		os.Exit(harnessMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestShort runs `go run . -short`: direct, floor and the real
// gateway binary, every phase, and requires every request to succeed.
func TestShort(t *testing.T) {
	results := filepath.Join(t.TempDir(), "results.json")
	out := runHarness(t, "-short", "-duration", "300ms", "-sat-step", "250ms", "-streams", "5", "-json", results)
	for _, want := range []string{"| 1,000 req/s, 200 KB |", "| saturation throughput", "| requests / errors / not forwarded |", "haltline",
		"Machine (median of the rounds): servers' CPU:", " servers' CPU stolen, % (rounds) |", "Servers' CPU stolen by the hypervisor (%, rounds) during the streams:",
		"runs for", "sent as X-Run-Id"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q\n%s", want, out)
		}
	}
	// Each fixed-rate phase's row ends with the share of the servers' CPU
	// stolen during it, measured.
	if !regexp.MustCompile(`(?m)^\| 1,000 req/s, 2 KB \|.* \d+\.\d \|$`).MatchString(out) {
		t.Errorf("the 1,000 req/s row lacks the CPU stolen during it\n%s", out)
	}
	// The gateway's own overhead, read from its answers, beside the
	// black-box figures: numbers for the gateway, none for the others.
	own := regexp.MustCompile(`\| gateway's own overhead p50 / p99 \(its overhead header\), 1,000 req/s, 2 KB \|( — \|)+ [1-9][\d,.]* / [1-9][\d,.]* \|`)
	if !own.MatchString(out) {
		t.Errorf("report lacks the gateway's own overhead\n%s", out)
	}
	// The proxies' context switches per request, counted over their
	// threads: each request wakes a proxy at least once at 1,000 req/s.
	sw := regexp.MustCompile(`(?m)^\| context switches per request at 1,000 req/s, proxy process \| — \|( [1-9][\d.]* \|)+\s+\|\s+\|$`)
	if !sw.MatchString(out) {
		t.Errorf("report lacks the proxies' context switches\n%s", out)
	}
	// Every target's saturation figures are those of its search's best
	// concurrency held after the search, not of the search's best level.
	if !strings.Contains(out, "The saturation figures are read over each search's best concurrency held 500ms after it.") {
		t.Errorf("the report does not say what the saturation figures are read over\n%s", out)
	}
	rep := readReport(t, results)
	for name, res := range rep.Rounds[0].Targets {
		sat := res.Saturation
		if sat.Held == nil {
			t.Errorf("%s: the saturation search's best concurrency was not held", name)
			continue
		}
		h := sat.Held
		if h.Concurrency != sat.PeakConc || h.Result.Requests == 0 || sat.PeakRPS != h.Result.Throughput ||
			sat.ProxyCPUus != h.Result.ProxyCPUus || sat.SearchRPS == 0 {
			t.Errorf("%s: saturation figures %.0f req/s, %.1f µs/req at %d workers, not the hold's %.0f, %.1f at %d (%d requests); search %.0f",
				name, sat.PeakRPS, sat.ProxyCPUus, sat.PeakConc, h.Result.Throughput, h.Result.ProxyCPUus, h.Concurrency, h.Result.Requests, sat.SearchRPS)
		}
		if (name == "direct") != (sat.ProxyCPUus == 0) {
			t.Errorf("%s: proxy CPU %.1f µs/req at saturation", name, sat.ProxyCPUus)
		}
	}
}

// TestSearchEnds: two levels in a row that do not beat the best by 3 % end
// a saturation search, not before it reached its lowest concurrency to end.
func TestSearchEnds(t *testing.T) {
	for _, c := range []struct {
		name    string
		rps     []float64 // a level's throughput, 1, 2, 4, … workers
		minConc int
		last    int // the last level's workers
	}{
		{"grows to the top", []float64{100, 200, 400, 800}, 1, 8},
		{"two flat levels", []float64{100, 200, 201, 150, 900}, 1, 8},
		{"one flat level", []float64{100, 200, 201, 400, 401, 402}, 1, 32},
		{"a dip before the lowest end", []float64{1000, 2000, 1500, 1600, 3000, 3010, 3020}, 16, 64},
		{"flat past the lowest end", []float64{1000, 2000, 1500, 1600, 1700}, 16, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			flat, best, last := 0, 0.0, 0
			for i, rps := range c.rps {
				last = 1 << i
				ends := searchEnds(&flat, rps, best, last, c.minConc)
				best = max(best, rps)
				if ends {
					break
				}
			}
			if last != c.last {
				t.Errorf("ended at %d workers, want %d", last, c.last)
			}
		})
	}
}

// TestShortDecompose runs the gateway in parts beside the gateway whole:
// the relay answers without the pipeline (no run state on its answers),
// the gateway without store writes governs every call as the whole one
// does and leaves no run in its store, where the whole one leaves some.
func TestShortDecompose(t *testing.T) {
	results := filepath.Join(t.TempDir(), "results.json")
	out := runHarness(t, "-short", "-decompose", "-only", "^("+phase1000+"|stream_"+apiOpenAI+")$", "-anthropic=false", "-nginx", "off", "-json", results)
	if !strings.Contains(out, "| "+decomposeRelay+" p50 |") || !strings.Contains(out, "| "+decomposeNoStore+" p50 |") {
		t.Errorf("the report lacks the decomposed targets\n%s", out)
	}
	rep := readReport(t, results)
	rd := rep.Rounds[0]
	whole, relay, nostore := rd.Targets["haltline"], rd.Targets[decomposeRelay], rd.Targets[decomposeNoStore]
	if whole == nil || relay == nil || nostore == nil {
		t.Fatalf("targets %v, want haltline, %s and %s", rd.TargetOrder, decomposeRelay, decomposeNoStore)
	}
	for name, res := range map[string]*targetResult{"haltline": whole, decomposeRelay: relay, decomposeNoStore: nostore} {
		p := res.Phases[phase1000]
		if p.Requests == 0 || p.Errors != 0 || res.Streams[apiOpenAI].Requests == 0 {
			t.Errorf("%s: %d requests, %d errors, %d streams", name, p.Requests, p.Errors, res.Streams[apiOpenAI].Requests)
		}
		if p.OwnP50us <= 0 {
			t.Errorf("%s: no overhead header on its answers", name)
		}
	}
	if n := len(relay.Phases[phase1000].RunStates); n != 0 {
		t.Errorf("the relay's answers carry run states %v: the pipeline answered them", relay.Phases[phase1000].RunStates)
	}
	if len(whole.Phases[phase1000].RunStates) == 0 || len(nostore.Phases[phase1000].RunStates) == 0 {
		t.Errorf("run states on the answers: whole %v, without store writes %v; want both governed",
			whole.Phases[phase1000].RunStates, nostore.Phases[phase1000].RunStates)
	}
	if whole.StoredRuns == nil || nostore.StoredRuns == nil || *whole.StoredRuns == 0 || *nostore.StoredRuns != 0 {
		t.Errorf("runs stored: whole %v, without store writes %v; want some, none", deref(whole.StoredRuns), deref(nostore.StoredRuns))
	}
}

// TestShortRedis runs the -redis targets beside the gateway on its
// embedded store: one gateway on a redis-server the harness starts, and
// two on the same one, their load spread by run and by alternating steps.
// Every request is answered, each process of the two gets its share, and
// the steps a run's answers count reach the workload's when consecutive
// steps alternate between the two: had the two not shared the run through
// Redis, each would count only its own half of them.
func TestShortRedis(t *testing.T) {
	if _, err := findRedis("auto"); err != nil {
		t.Fatalf("the Redis targets need redis-server (Debian package redis-server; .ci/run installs it): %v", err)
	}
	results := filepath.Join(t.TempDir(), "results.json")
	// 1,000 requests over 128 slots: every run reaches its 4th step.
	out := runHarness(t, "-short", "-redis", "auto", "-only", "^("+phase1000+"|"+phaseSat+")$", "-anthropic=false", "-nginx", "off",
		"-duration", "1s", "-json", results)
	for _, want := range []string{"| " + redisOne + " p50 |", "| " + redisTwo + " p50 |", "| " + redisTwoAlt + " p50 |", "Targets on Redis (Redis server",
		"each run's calls go to one process", "consecutive steps of a run alternate", "not the gain of a second machine",
		"redis-server for " + redisTwoAlt + ", 1,000 req/s, 2 KB: ", "redis-server for " + redisOne + ", saturation: "} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q\n%s", want, out)
		}
	}
	// Redis's own CPU, for the Redis targets only; their p50 over the
	// embedded store's, with a verdict for each.
	for _, row := range []string{"CPU per request at 1,000 req/s, redis-server", "CPU per request at saturation, redis-server"} {
		if !regexp.MustCompile(`(?m)^\| ` + row + ` \|( — \|){3}( [\d.]+ \|){3}`).MatchString(out) {
			t.Errorf("report lacks the row %s with figures for the Redis targets alone\n%s", row, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\| p50 over the embedded store's \(haltline's\), 1,000 req/s, 2 KB \|( — \|){3}( -?[\d.]+ \|){3} ≤ 300 µs \(on Redis\) \| ` + redisOne + `: .*; ` + redisTwo + `: .*; ` + redisTwoAlt + `: .* \|$`).MatchString(out) {
		t.Errorf("report lacks the Redis targets' p50 over the embedded store's\n%s", out)
	}
	// Peak RSS per process: two figures for the targets of two.
	if !regexp.MustCompile(`(?m)^\| peak RSS \(VmHWM\), MiB \|( — \|)( [\d.]+ \|){3}( [\d.]+ / [\d.]+ \|){2}`).MatchString(out) {
		t.Errorf("report lacks each process's peak RSS\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\| requests / errors / not forwarded (\| [1-9]\d* / 0 / 0 ){6}\| 0 errors \|`).MatchString(out) {
		t.Errorf("report lacks the six targets' requests, all answered\n%s", out)
	}
	rep := readReport(t, results)
	rd := rep.Rounds[0]
	if rd.RedisRSSKB == 0 {
		t.Error("no peak RSS for redis-server")
	}
	for _, name := range []string{"haltline", redisOne, redisTwo, redisTwoAlt} {
		res := rd.Targets[name]
		if res == nil {
			t.Fatalf("targets %v: no %s", rd.TargetOrder, name)
		}
		p := res.Phases[phase1000]
		if p.Requests == 0 || p.Errors != 0 || res.Saturation.Requests == 0 || res.Saturation.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors; saturation %d, %d", name, p.Requests, p.Errors, res.Saturation.Requests, res.Saturation.Errors)
		}
		if p.MaxRunStep != 4 {
			t.Errorf("%s: the answers' highest X-Run-Step is %d, want the workload's 4", name, p.MaxRunStep)
		}
		onRedis := name != "haltline"
		if onRedis != (p.RedisCPUus+res.Saturation.RedisCPUus > 0) {
			t.Errorf("%s: redis-server's CPU %.1f µs/req at 1,000 req/s, %.1f at saturation", name, p.RedisCPUus, res.Saturation.RedisCPUus)
		}
		// What redis-server did for the target, by command: at least the
		// calls of the ledger's scripts.
		if onRedis != (p.RedisCmds["evalsha"].Calls+p.RedisCmds["eval"].Calls > 0) || onRedis != (len(res.Saturation.RedisCmds) > 0) {
			t.Errorf("%s: redis-server's commands per request %v at 1,000 req/s, %v at saturation", name, p.RedisCmds, res.Saturation.RedisCmds)
		}
		if onRedis && res.StoredRuns != nil {
			t.Errorf("%s: %d runs in an embedded store", name, *res.StoredRuns)
		}
		two := name == redisTwo || name == redisTwoAlt
		if two != (len(res.ReplicaPeakRSSKB) == 2) {
			t.Errorf("%s: peak RSS by process %v", name, res.ReplicaPeakRSSKB)
		}
		if !two {
			continue
		}
		if len(p.ReplicaRequests) != 2 || p.ReplicaRequests[0] == 0 || p.ReplicaRequests[1] == 0 {
			t.Errorf("%s: requests by process %v, want both served", name, p.ReplicaRequests)
		}
	}
}

// Requests of a target of two processes: by run, every step of a run to
// the same one and the runs shared out; by step, consecutive steps to
// different ones.
func TestReplicaOf(t *testing.T) {
	w := &workload{steps: 4, slots: 3}
	byRunT := &target{urls: []string{"a", "b"}, spread: byRun}
	byStepT := &target{urls: []string{"a", "b"}, spread: byStep}
	for i := range uint64(24) {
		slot, step := w.position(i)
		if got := byRunT.replicaOf(w, i); got != int(slot%2) {
			t.Errorf("by run, request %d (slot %d, step %d): process %d", i, slot, step, got)
		}
		if i >= 3 && byStepT.replicaOf(w, i) == byStepT.replicaOf(w, i-3) && step > 0 {
			t.Errorf("by step, request %d (slot %d, step %d): the same process as the step before", i, slot, step)
		}
	}
	if got := (&target{url: "a"}).replicaOf(w, 5); got != 0 {
		t.Errorf("one process: %d", got)
	}
}

// contextSwitches counts every thread's switches, not only the first
// thread's (all the process's own status counts): three threads that each
// sleep n times add at least 3n, where at most one of them is the first.
func TestContextSwitchesCountsEveryThread(t *testing.T) {
	const threads, sleeps = 3, 50
	before, err := contextSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var slept sync.WaitGroup
	counted := make(chan struct{})
	defer close(counted)
	for range threads {
		slept.Add(1)
		go func() {
			// A thread to itself; it ends with the goroutine, so it
			// waits until it was counted.
			runtime.LockOSThread()
			for range sleeps {
				time.Sleep(100 * time.Microsecond)
			}
			slept.Done()
			<-counted
		}()
	}
	slept.Wait()
	after, err := contextSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < threads*sleeps {
		t.Errorf("%d switches over %d sleeps", after-before, threads*sleeps)
	}
}

// TestShortLineage runs a fixed-rate phase with -lineage: no request names
// its run, and the gateway must still attach each step to its run's earlier
// ones by the tool calls they echo — the report's steps a run are the
// workload's (3.75 here, the runs cut short at the phase's end counted),
// where a step started afresh would bring them toward one. However loaded
// the machine, no step goes before the answer it echoes
// (TestLineageStepWaitsForItsAnswer): before that wait, an open-loop load
// on a loaded machine sent some, each starting a run of its own.
func TestShortLineage(t *testing.T) {
	out := runHarness(t, "-short", "-lineage", "-only", "^"+phase1000+"$", "-anthropic=false", "-nginx", "off",
		"-slots", "100", "-duration", "3s")
	m := regexp.MustCompile(`named (\d+) runs for (\d+) requests: ([\d.]+) steps a run \(the workload's runs have 4; .*\), found by lineage`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("report lacks the runs the gateway named\n%s", out)
	}
	if steps, _ := strconv.ParseFloat(m[3], 64); steps < 3.5 {
		t.Errorf("%s runs for %s requests: %.2f steps a run, want about 4\n%s", m[1], m[2], steps, out)
	}
}

// -pprof writes the gateway's CPU profiles, taken while it is measured:
// a profile a turn of a fixed-rate phase and one or more over its
// saturation search, none of the references, each a gzipped profile whose
// samples are the gateway's code.
func TestShortProfiles(t *testing.T) {
	dir := t.TempDir()
	out := runHarness(t, "-short", "-only", "^("+phase1000+"|"+phaseSat+")$", "-anthropic=false", "-nginx", "off", "-pprof", dir)
	if !strings.Contains(out, "CPU profiles, taken while they were measured, are in "+dir) {
		t.Errorf("the report does not say where the profiles are\n%s", out)
	}
	for _, c := range []struct {
		glob string
		min  int
	}{{"haltline-" + phase1000 + "-r1-*.pprof", 2}, {"haltline-" + phaseSat + "-r1-*.pprof", 1}, {"haltline-" + phaseSat + "-r1-*.heap", 1}, {"floor-*", 0}, {"direct-*", 0}} {
		files, _ := filepath.Glob(filepath.Join(dir, c.glob))
		if len(files) < c.min || (c.min == 0 && len(files) > 0) {
			t.Errorf("%d files %s, want %d or more (none for a reference)", len(files), c.glob, c.min)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pprof"))
	gatewayCode := false
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		prof, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// A CPU profile's sample types are in its string table.
		if !bytes.Contains(prof, []byte("nanoseconds")) {
			t.Errorf("%s is not a CPU profile", f)
		}
		if strings.Contains(f, phaseSat) && bytes.Contains(prof, []byte("github.com/haltline/haltline/proxy.")) {
			gatewayCode = true
		}
	}
	if !gatewayCode {
		t.Errorf("no saturation profile samples the gateway's proxy package: %q", files)
	}
}

// TestSoakShort runs the soak's short mode: the gateway at a fixed rate for
// 20 s, sampled every 2 s, the table printed and every request answered.
// Its trends are not checked: seconds of a shared machine say nothing of
// a leak.
func TestSoakShort(t *testing.T) {
	results := filepath.Join(t.TempDir(), "soak.json")
	out := runHarness(t, "-short", "-soak", "20s", "-soak-every", "2s", "-soak-rate", "500", "-nginx", "off", "-json", results)
	for _, want := range []string{"RSS MiB", "anon/file", "goroutines", "store MiB", "CPU µs/r", "written/r", "soak ran", "p99.9"} {
		if !strings.Contains(out, want) {
			t.Errorf("soak output lacks %q\n%s", want, out)
		}
	}
	raw, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Samples []soakSample `json:"samples"`
		Result  phaseResult  `json:"result"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Samples) < 8 || got.Result.Requests < 1000 || got.Result.GCPauses == nil {
		t.Fatalf("%d samples, %d requests, GC pauses %v", len(got.Samples), got.Result.Requests, got.Result.GCPauses)
	}
	last := got.Samples[len(got.Samples)-1]
	if last.RSSKB == 0 || last.Goroutines == 0 || last.StoreBytes == 0 || last.Requests == 0 || last.CPUPerRequest == 0 || last.WrittenPerRequest == 0 ||
		last.AnonKB == 0 || last.FileKB == 0 || last.AnonKB+last.FileKB > last.RSSKB+last.RSSKB/10 {
		t.Fatalf("a sample without a figure: %+v", last)
	}
}

// With -lineage a step is not sent before the answer to its run's step
// before it (an agent cannot echo what it has not received), a new run's
// first step waits for nothing, and a run's last answer is not kept.
func TestLineageStepWaitsForItsAnswer(t *testing.T) {
	w := &workload{api: apiOpenAI, size: size2KB, steps: 2, slots: 2, tag: "w", lineage: true}
	for want := range uint64(2) { // step 0 of both slots
		if i, _, _ := w.next(); i != want {
			t.Fatalf("request %d, want %d", i, want)
		}
	}
	sent := make(chan uint64)
	go func() {
		i, _, _ := w.next() // slot 0, step 1: waits for request 0
		sent <- i
	}()
	w.answer(1) // slot 1's step 0: not slot 0's
	select {
	case i := <-sent:
		t.Fatalf("request %d went before the answer to request 0", i)
	case <-time.After(50 * time.Millisecond):
	}
	w.answer(0)
	select {
	case i := <-sent:
		if i != 2 {
			t.Fatalf("request %d, want 2", i)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("request 2 still waits after the answer to request 0")
	}
	w.answer(2) // a run's last step: nothing waits for it
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.done) != 1 { // request 1's answer, for request 3
		t.Fatalf("answers kept: %v", w.done)
	}
	if i, ok := requestIndex(w.requestURL("http://127.0.0.1:1/v1/chat/completions", 12345)); !ok || i != 12345 {
		t.Fatalf("request index %d, %v", i, ok)
	}
}

// runHarness runs the harness with args as a subprocess of the test binary
// (see mainEnv), against a prebuilt gateway when
// HALTLINE_BENCH_GATEWAY_BIN names one, and returns its output; it fails
// the test if the harness fails or runs for more than 3 minutes.
func runHarness(t *testing.T, args ...string) string {
	t.Helper()
	// A prebuilt gateway saves the build (and lets the harness be tested
	// while the gateway's sources are being edited).
	if bin := os.Getenv("HALTLINE_BENCH_GATEWAY_BIN"); bin != "" {
		args = append(args, "-gateway-bin", bin)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("harness %q failed: %v\n%s", args, err, out.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("harness %q did not end\n%s", args, out.String())
	}
	return out.String()
}

// TestWorkload checks that the requests have the exact sizes, are valid
// JSON, and that the mock's answers are the tool calls the next step echoes.
func TestWorkload(t *testing.T) {
	m := &mock{steps: 3, chunks: 5}
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	c := loadClient()
	for _, api := range []string{apiOpenAI, apiAnthropic} {
		for _, size := range []int{size2KB, size200KB} {
			w := &workload{api: api, size: size, steps: 3, slots: 2, tag: "t"}
			for i := 0; i < 6; i++ {
				_, run, body := w.next()
				if len(body) != size {
					t.Fatalf("%s step body is %d bytes, want %d", api, len(body), size)
				}
				if !json.Valid(body) {
					t.Fatalf("%s body is not JSON: %.300s", api, body)
				}
				req := httptest.NewRequest("POST", srv.URL+w.path(), bytes.NewReader(body))
				rec := httptest.NewRecorder()
				m.handler().ServeHTTP(rec, req)
				if rec.Code != 200 || !json.Valid(rec.Body.Bytes()) {
					t.Fatalf("mock answered %d: %s", rec.Code, rec.Body.String())
				}
				step := i / 2 // two slots
				final := step == 2
				if got := strings.Contains(rec.Body.String(), `"tool_`); got == final {
					t.Fatalf("step %d: final=%v but answer %s", step, final, rec.Body.String())
				}
				if !final && !strings.Contains(rec.Body.String(), run+"_"+string(rune('0'+step))) {
					t.Fatalf("step %d of %s: tool call id does not name the run: %s", step, run, rec.Body.String())
				}
				if !final {
					// The next step's body must echo this step's tool call verbatim.
					_, next := bodyParts(api, run, step+1, false, false)
					var call []byte
					if api == apiOpenAI {
						call = appendOpenAIToolCall(nil, []byte(run), step)
					} else {
						call = appendAnthropicToolUse(nil, []byte(run), step)
					}
					if !bytes.Contains(next, call) || !bytes.Contains(rec.Body.Bytes(), call) {
						t.Fatalf("step %d: echo and answer differ", step)
					}
				}
			}
		}
		// Streams end with their final event and carry the chunks.
		ws := &workload{api: api, size: size2KB, steps: 3, slots: 1, stream: true, tag: "s"}
		r, err := streams(t.Context(), c, &target{name: "mock", url: srv.URL}, ws, 2)
		if err != nil || r.Errors != 0 {
			t.Fatalf("%s streams: %v %v", api, err, r.ErrorSample)
		}
	}
}

// TestLogOutputWorkload checks the log-output phase's requests: valid
// JSON whose tool results are logOutputSize bytes of JSON log lines, dense
// in escapes once in the body, distinct from run to run and step to step,
// and answered by the mock as the step they are.
func TestLogOutputWorkload(t *testing.T) {
	m := &mock{steps: 3, chunks: 5}
	seen := map[string]bool{}
	for _, api := range []string{apiOpenAI, apiAnthropic} {
		w := &workload{api: api, size: size2KB, steps: 3, slots: 2, tag: "l" + api, toolOutput: true}
		for i := 0; i < 6; i++ {
			_, run, body := w.next()
			step := i / 2
			results := toolResults(t, api, body)
			if len(results) != step {
				t.Fatalf("%s step %d: %d tool results", api, step, len(results))
			}
			for j, r := range results {
				head, lines, ok := strings.Cut(r, "\n")
				if !ok || head != "run "+run+" step "+strconv.Itoa(j)+":" || len(lines) != logOutputSize {
					t.Fatalf("%s tool result %d of %s: head %q, %d bytes of lines", api, j, run, head, len(lines))
				}
				first, _, _ := strings.Cut(lines, "\n")
				if !json.Valid([]byte(first)) || !strings.Contains(first, `C:\\srv`) {
					t.Fatalf("first log line %q", first)
				}
				seen[r] = true
			}
			if step > 0 && !bytes.Contains(body, []byte(`C:\\\\srv`)) {
				t.Fatalf("%s step %d: no escaped path in the body", api, step)
			}
			req := httptest.NewRequest("POST", "http://mock"+w.path(), bytes.NewReader(body))
			rec := httptest.NewRecorder()
			m.handler().ServeHTTP(rec, req)
			if final := step == 2; rec.Code != 200 || strings.Contains(rec.Body.String(), `"tool_`) == final {
				t.Fatalf("%s step %d: mock answered %d: %.300s", api, step, rec.Code, rec.Body.String())
			}
		}
	}
	if want := 2 * 2 * 2; len(seen) != want { // APIs × runs × results of a run
		t.Errorf("%d distinct tool results, want %d", len(seen), want)
	}
}

// toolResults returns the tool results of a request of api, decoded.
func toolResults(t *testing.T, api string, body []byte) []string {
	t.Helper()
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("%s body is not JSON: %v", api, err)
	}
	var out []string
	for _, m := range req.Messages {
		switch {
		case api == apiOpenAI && m.Role == "tool":
			var s string
			if err := json.Unmarshal(m.Content, &s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		case api == apiAnthropic && m.Role == "user" && m.Content[0] == '[':
			var blocks []struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(m.Content, &blocks); err != nil {
				t.Fatal(err)
			}
			for _, b := range blocks {
				out = append(out, b.Content)
			}
		}
	}
	return out
}

// TestStreamPausesAfterItsFirstEvent checks the mock's pause after a
// stream's first event: the client reads that event alone, and the rest
// no sooner than the pause after the request.
func TestStreamPausesAfterItsFirstEvent(t *testing.T) {
	const gap = 500 * time.Millisecond
	m := &mock{steps: 3, chunks: 5, firstGap: gap}
	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	c := loadClient()
	for _, api := range []string{apiOpenAI, apiAnthropic} {
		w := &workload{api: api, size: size2KB, steps: 3, slots: 1, stream: true, tag: "g"}
		_, run, body := w.next()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+w.path(), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = w.header(run)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 32<<10)
		n, err := resp.Body.Read(buf)
		if err != nil || bytes.Count(buf[:n], []byte("\n\n")) != 1 || !bytes.HasSuffix(buf[:n], []byte("\n\n")) {
			t.Fatalf("%s: first read %q, %v: want the first event alone", api, buf[:n], err)
		}
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(rest) == 0 {
			t.Fatalf("%s: rest of the stream: %d bytes, %v", api, len(rest), err)
		}
		if d := time.Since(start); d < gap {
			t.Fatalf("%s: whole stream in %v, under the %v pause", api, d, gap)
		}
	}
}

// -only runs the phases it names and leaves the others' checks out of the
// report, rather than judging figures that were never measured.
func TestOnlySelectsPhases(t *testing.T) {
	o, err := parseOptions([]string{"-only", "^saturation$"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range phaseNames {
		if got, want := o.runs(ph), ph == phaseSat; got != want {
			t.Errorf("runs(%s) = %v, want %v", ph, got, want)
		}
	}
	r := newReport(o, placement{}, []variant{{name: "haltline"}}, false, "")
	r.Summary = map[string]*summary{"haltline": {}, "floor": {}}
	r.checks("haltline")
	var measures []string
	for _, c := range r.Checks {
		measures = append(measures, c.Measure)
	}
	want := []string{checkSat, checkCPU}
	if !slices.Equal(measures, want) {
		t.Errorf("checks %q, want %q", measures, want)
	}
	if r.Meta.Only != "^saturation$" {
		t.Errorf("meta only_phases %q", r.Meta.Only)
	}
	if _, err := parseOptions([]string{"-only", "("}); err == nil {
		t.Error("a bad -only expression was accepted")
	}
	all, _ := parseOptions(nil)
	for _, ph := range phaseNames {
		if !all.runs(ph) {
			t.Errorf("without -only, %s does not run", ph)
		}
	}
}

// interleave gives every target its turns, rotating the order so that no
// target always follows the same one, and stops at the first error.
func TestInterleave(t *testing.T) {
	var got []string
	err := interleave(t.Context(), 3, 3, func(i, s int) error {
		got = append(got, fmt.Sprintf("%d/%d", s, i))
		return nil
	})
	want := []string{"0/0", "0/1", "0/2", "1/1", "1/2", "1/0", "2/2", "2/0", "2/1"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("turns %v (%v), want %v", got, err, want)
	}
	calls := 0
	boom := errors.New("boom")
	if err := interleave(t.Context(), 3, 2, func(i, s int) error { calls++; return boom }); err != boom || calls != 1 {
		t.Errorf("after an error: %v, %d calls", err, calls)
	}
}

// A phase measured in turns is read as one: its percentiles and request
// counts are those of all its samples together, and the proxy's CPU and
// context switches per request count what it did between its turns too (a
// checkpoint that ran while other targets had theirs); the mock's CPU
// counts the target's turns only, as the other targets share the mock.
func TestPhaseAccMergesTurns(t *testing.T) {
	var a phaseAcc
	// The counters: the proxy's CPU and switches, the mock's CPU.
	clock := cpuSnap{proxy: time.Second, proxySwitches: 1000, mock: time.Second}
	turn := func(lat []time.Duration, cpu time.Duration, switches int64) {
		before := clock
		clock.proxy += cpu
		clock.proxySwitches += switches
		clock.mock += 2 * cpu
		a.addTurn(before, clock)
		a.lat = append(a.lat, lat...)
		a.requests += len(lat)
		a.elapsed += time.Second
	}
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	turn(ms(1, 1, 1, 1, 1), 5*time.Millisecond, 30) // a quiet turn
	// Work in the others' turns: the proxy's background, the mock's
	// serving them.
	clock.proxy += 10 * time.Millisecond
	clock.proxySwitches += 14
	clock.mock += time.Second
	turn(ms(9, 9, 9, 9, 9, 9), 50*time.Millisecond, 66)
	r := a.result(&target{proxy: &proc{}})
	if r.Requests != 11 || r.P50us != 9000 || r.MaxUs != 9000 || r.Throughput != 5.5 ||
		r.ProxyCPUus != 65000.0/11 || r.ProxySwitches != 110.0/11 || r.MockCPUus != 110000.0/11 {
		t.Errorf("merged %+v", r)
	}
}

// -variant takes a binary of its own after an @: another build measured in
// the same rounds as the first; without one the run's binary serves.
func TestVariantFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want variant
		bad  bool
	}{
		{in: "redis=--redis-url redis://127.0.0.1:6379", want: variant{name: "redis", args: "--redis-url redis://127.0.0.1:6379"}},
		{in: "new@/tmp/gateway-new=", want: variant{name: "new", bin: "/tmp/gateway-new"}},
		{in: "new@/tmp/gateway-new=--log-level debug", want: variant{name: "new", bin: "/tmp/gateway-new", args: "--log-level debug"}},
		{in: "plain=", want: variant{name: "plain"}},
		{in: "no-equals", bad: true},
		{in: "=args", bad: true},
		{in: "@/tmp/gateway=", bad: true},
	} {
		var v variantFlag
		err := v.Set(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("%q accepted as %+v", tc.in, v)
		case !tc.bad && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case !tc.bad && (len(v) != 1 || !reflect.DeepEqual(v[0], tc.want)):
			t.Errorf("%q = %+v, want %+v", tc.in, v, tc.want)
		}
	}
}

// A variant with a binary of its own is that binary, started for its turns
// beside the run's own and reported as a target of its own.
func TestVariantRunsItsBinary(t *testing.T) {
	dir := t.TempDir()
	bin := os.Getenv("HALTLINE_BENCH_GATEWAY_BIN")
	if bin == "" {
		var err error
		if bin, err = buildGateway(t.Context(), dir, false); err != nil {
			t.Fatal(err)
		}
	}
	// The variant's binary notes each start, then is the gateway.
	marker := filepath.Join(dir, "started")
	wrapper := filepath.Join(dir, "gateway-variant")
	script := fmt.Sprintf("#!/bin/sh\necho started >> %q\nexec %q \"$@\"\n", marker, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := runHarness(t, "-short", "-only", "^"+phase1000+"$", "-anthropic=false", "-nginx", "off",
		"-duration", "300ms", "-variant", "wrapped@"+wrapper+"=")
	if started, err := os.ReadFile(marker); err != nil || strings.Count(string(started), "started") != 1 {
		t.Errorf("the variant's binary was started %q times (%v), want once (one round)", started, err)
	}
	// Its column, after the first gateway's, with its requests answered.
	if !strings.Contains(out, "| measure | direct | floor | haltline | wrapped | issue target (haltline) | met |") {
		t.Errorf("report lacks the variant's column\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\| requests / errors / not forwarded (\| [1-9]\d* / 0 / 0 ){4}\| 0 errors \|`).MatchString(out) {
		t.Errorf("report lacks the four targets' requests, all answered\n%s", out)
	}
}

// The saturation searches go references first, then the gateways in an
// order that rotates with the round, so that no gateway's search always
// follows another's, and none precedes a reference's.
func TestSatOrder(t *testing.T) {
	targets := []*target{{name: "direct"}, {name: "floor"}, {name: "nginx"}, {name: "haltline", gateway: true}, {name: "new", gateway: true}, {name: "redis", gateway: true}}
	for idx, want := range []string{
		"direct floor nginx haltline new redis",
		"direct floor nginx new redis haltline",
		"direct floor nginx redis haltline new",
		"direct floor nginx haltline new redis",
	} {
		var got []string
		for _, t := range satOrder(targets, idx) {
			got = append(got, t.name)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("round %d: %q, want %q", idx, strings.Join(got, " "), want)
		}
	}
	// One gateway: the order it always had.
	one := targets[:4]
	if got := satOrder(one, 3); len(got) != 4 || got[3].name != "haltline" {
		t.Errorf("one gateway, round 3: %v", got)
	}
}

func deref(n *int) any {
	if n == nil {
		return nil
	}
	return *n
}

// readReport reads the JSON results a harness run wrote.
func readReport(t *testing.T, path string) report {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestDecomposeOverlay: the gateway's files that the parts edit hold the
// text each edit replaces, once; one that does not stops the build with
// its name.
func TestDecomposeOverlay(t *testing.T) {
	root, err := gatewayModuleDir(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	path, err := partsOverlay(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var overlay struct{ Replace map[string]string }
	if err := json.Unmarshal(data, &overlay); err != nil {
		t.Fatal(err)
	}
	if len(overlay.Replace) != len(partsFiles)+len(partsEdits) {
		t.Fatalf("overlay %v", overlay.Replace)
	}
	for _, e := range partsEdits {
		got, err := os.ReadFile(overlay.Replace[filepath.Join(root, filepath.FromSlash(e.file))])
		if err != nil || !strings.Contains(string(got), e.new) {
			t.Fatalf("%s in parts lacks its edit: %v", e.file, err)
		}
	}

	changed := t.TempDir()
	for _, e := range partsEdits {
		if err := os.MkdirAll(filepath.Join(changed, filepath.Dir(e.file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(changed, e.file), []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := partsOverlay(changed, t.TempDir()); err == nil || !strings.Contains(err.Error(), partsEdits[0].file) {
		t.Fatalf("an edit whose text is gone: %v", err)
	}
}
