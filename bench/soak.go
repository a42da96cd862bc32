package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The soak (-soak D): the gateway alone at a fixed rate (-soak-rate) for
// D, sampled every -soak-every: its RSS, its goroutines and its store's
// size on disk. It fails when one of them trends upward: after the
// warm-up (-soak-warmup), the mean of the last third of the samples
// against the mean of the first third, beyond a tolerance. A leak grows
// with time; a cache filling up, a checkpoint's sawtooth or the
// collector's heap goal levels off within the warm-up.
//
// With -short it fails only on errors: the trends are printed, not checked.
//
// The store keeps every run for its retention (30 days by default), so its
// file grows with the runs written, as it should: what is checked is its
// size per request served, which a leak of pages (a freelist not reused)
// makes grow, and the size of its log, which the checkpoints bound.

// soakSample is one reading.
type soakSample struct {
	At       time.Duration `json:"at_ns"`
	Requests int64         `json:"requests"`
	Errors   int64         `json:"errors"`
	RSSKB    int64         `json:"rss_kb"`
	// RSS split: the process's own memory (the Go heap, stacks) and the
	// files it maps (the binary, the bbolt file), which a memory limit
	// can take back.
	AnonKB     int64 `json:"rss_anon_kb"`
	FileKB     int64 `json:"rss_file_kb"`
	Goroutines int64 `json:"goroutines"`
	StoreBytes int64 `json:"store_bytes"` // the bbolt file
	LogBytes   int64 `json:"log_bytes"`   // the log's segments
	// Since the sample before: the gateway's CPU time and the bytes it
	// had written to disk, per request answered (0 when none was).
	CPUPerRequest     time.Duration `json:"cpu_per_request_ns"`
	WrittenPerRequest int64         `json:"written_per_request_bytes"`
}

// soakTolerance says how far the last third's mean may exceed the first
// third's: a ratio and an absolute slack, for small values.
type soakTolerance struct {
	name  string
	ratio float64
	slack float64
	value func(s soakSample) float64
}

var soakChecks = []soakTolerance{
	{"RSS (KiB)", 1.10, 8 << 10, func(s soakSample) float64 { return float64(s.RSSKB) }},
	{"goroutines", 1.10, 20, func(s soakSample) float64 { return float64(s.Goroutines) }},
	{"store log (bytes)", 1.50, 8 << 20, func(s soakSample) float64 { return float64(s.LogBytes) }},
	{"store file per request (bytes)", 1.10, 64, func(s soakSample) float64 {
		if s.Requests == 0 {
			return 0
		}
		return float64(s.StoreBytes) / float64(s.Requests)
	}},
	// A call's cost must not grow with the store it has filled.
	{"CPU per request (µs)", 1.25, 20, func(s soakSample) float64 { return float64(s.CPUPerRequest) / float64(time.Microsecond) }},
	{"disk written per request (bytes)", 1.25, 1 << 10, func(s soakSample) float64 { return float64(s.WrittenPerRequest) }},
}

// soakTrends returns a line for each measure that trends upward over the
// samples taken after warmup, and an error when there are too few.
func soakTrends(samples []soakSample, warmup time.Duration) ([]string, error) {
	var kept []soakSample
	for _, s := range samples {
		if s.At >= warmup {
			kept = append(kept, s)
		}
	}
	if len(kept) < 3 {
		return nil, fmt.Errorf("%d samples after the warm-up of %s: at least 3 are needed (a longer -soak or a shorter -soak-every)", len(kept), warmup)
	}
	third := len(kept) / 3
	mean := func(ss []soakSample, f func(soakSample) float64) float64 {
		var sum float64
		for _, s := range ss {
			sum += f(s)
		}
		return sum / float64(len(ss))
	}
	var bad []string
	for _, c := range soakChecks {
		first, last := mean(kept[:third], c.value), mean(kept[len(kept)-third:], c.value)
		if last > first*c.ratio+c.slack {
			bad = append(bad, fmt.Sprintf("%s trends upward: %.0f in the last third against %.0f in the first (tolerance ×%.2f + %.0f)",
				c.name, last, first, c.ratio, c.slack))
		}
	}
	return bad, nil
}

// soakEvery is the sampling period: -soak-every, or a tenth of a soak
// shorter than ten minutes (at least a second).
func (o options) soakEvery() time.Duration {
	if o.soakSample > 0 {
		return o.soakSample
	}
	if o.soak < 10*time.Minute {
		return max(time.Second, (o.soak / 10).Truncate(time.Second))
	}
	return time.Minute
}

// soakWarmup is -soak-warmup, or a tenth of the soak, at least one period.
func (o options) soakWarmup() time.Duration {
	if o.soakWarm > 0 {
		return o.soakWarm
	}
	return max(o.soakEvery(), o.soak/10)
}

// runSoak runs the soak and prints its table; it returns an error when the
// run failed or a measure trends upward.
func runSoak(ctx context.Context, o options, out io.Writer) error {
	pl := newPlacement(o.pin)
	if err := pl.pinSelf(); err != nil {
		pl.enabled = false
	}
	dir, err := os.MkdirTemp("", "haltline-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := o.gatewayBin
	if bin == "" {
		fmt.Fprintln(out, "building the gateway (go build ./cmd/gateway)…")
		if bin, err = buildGateway(ctx, dir, false); err != nil {
			return err
		}
	}
	mock, err := startRole(ctx, &pl, dir, "mock", "-steps", strconv.Itoa(o.steps), "-chunks", strconv.Itoa(o.chunks))
	if err != nil {
		return err
	}
	defer mock.stop()
	gw, err := startGateway(ctx, &pl, dir, "haltline", bin, mock.addrURL(), strings.Fields(o.gatewayArgs), nil)
	if err != nil {
		return err
	}
	defer gw.stop()
	t := &target{name: "haltline", mock: mock, proxy: gw, url: gw.addrURL(), tag: "soak", gateway: true}
	every, warmup := o.soakEvery(), o.soakWarmup()
	fmt.Fprintf(out, "soak: %d req/s for %s, sampled every %s, trends read after %s\n", o.soakRate, o.soak, every, warmup)
	fmt.Fprintf(out, "%8s %10s %6s %9s %9s %10s %10s %9s %9s %10s\n", "t", "requests", "errors", "RSS MiB", "anon/file", "goroutines", "store MiB", "log MiB", "CPU µs/r", "written/r")

	c := loadClient()
	defer c.CloseIdleConnections()
	w := &workload{api: apiOpenAI, size: size2KB, steps: o.steps, slots: o.slots, tag: "soak"}
	var (
		mu      sync.Mutex
		samples []soakSample
		sent    soakCounter
	)
	start := time.Now()
	var lastCPU time.Duration
	var lastWritten, lastRequests int64
	sample := func() {
		s := soakSample{At: time.Since(start), RSSKB: rss(gw.pid())}
		s.AnonKB, s.FileKB = statusKB(gw.pid(), "RssAnon"), statusKB(gw.pid(), "RssFile")
		s.Requests, s.Errors = sent.load()
		s.Goroutines, _ = scrapeGauge(ctx, c, gw.admin, "go_goroutines")
		s.StoreBytes, s.LogBytes = storeSize(gw.data)
		cpu, _ := cpuTime(gw.pid())
		written := writtenBytes(gw.pid())
		if n := s.Requests - lastRequests; n > 0 {
			s.CPUPerRequest = (cpu - lastCPU) / time.Duration(n)
			s.WrittenPerRequest = (written - lastWritten) / n
		}
		lastCPU, lastWritten, lastRequests = cpu, written, s.Requests
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
		fmt.Fprintf(out, "%8s %10d %6d %9.1f %9s %10d %10.1f %9.1f %9.0f %10d\n", s.At.Round(time.Second), s.Requests, s.Errors,
			float64(s.RSSKB)/1024, fmt.Sprintf("%d/%d", s.AnonKB>>10, s.FileKB>>10), s.Goroutines, float64(s.StoreBytes)/(1<<20), float64(s.LogBytes)/(1<<20),
			float64(s.CPUPerRequest)/float64(time.Microsecond), s.WrittenPerRequest)
	}
	done := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	var acc phaseAcc
	acc.onResult = sent.add
	err = acc.attack(ctx, c, t, w, o.soakRate, 0, o.soak)
	close(done)
	sampling.Wait()
	if err != nil {
		return err
	}
	r := acc.result(t)
	fmt.Fprintf(out, "%d requests, %d errors; p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs%s\n",
		r.Requests, r.Errors, r.P50us, r.P99us, r.P999us, memNote(r.PeakRSSKB, r.GCPauses))
	var fail []string
	if r.Errors > 0 {
		fail = append(fail, fmt.Sprintf("%d requests failed%s", r.Errors, errNote(r.ErrorSample)))
	}
	if done, perr := gw.exited(); done {
		fail = append(fail, fmt.Sprintf("the gateway exited: %v\n%s", perr, gw.tail(30)))
	}
	trends, err := soakTrends(samples, warmup)
	if err != nil {
		trends = append(trends, err.Error())
	}
	if o.short {
		// As the phases' short mode: it proves that everything runs; a
		// soak of seconds on a shared machine says nothing of a trend.
		for _, tr := range trends {
			fmt.Fprintln(out, "not checked in -short:", tr)
		}
		trends = nil
	}
	fail = append(fail, trends...)
	if o.jsonOut != "" {
		if err := writeSoakJSON(o.jsonOut, samples, r); err != nil {
			return err
		}
	}
	if len(fail) > 0 {
		return fmt.Errorf("soak failed:\n  %s", strings.Join(fail, "\n  "))
	}
	if o.short {
		fmt.Fprintln(out, "soak ran (-short: no verdict on the trends)")
		return nil
	}
	fmt.Fprintln(out, "soak passed: no measure trends upward")
	return nil
}

// soakCounter counts the answers as they arrive, for the samples.
type soakCounter struct {
	mu               sync.Mutex
	requests, errors int64
}

func (c *soakCounter) add(ok bool) {
	c.mu.Lock()
	c.requests++
	if !ok {
		c.errors++
	}
	c.mu.Unlock()
}

func (c *soakCounter) load() (int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests, c.errors
}

// writtenBytes is what the process has had written to disk
// (/proc/PID/io write_bytes: the store's log, checkpoints and fsyncs
// reaching the block layer), 0 when unreadable.
func writtenBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(statusValue(b, "write_bytes"), 10, 64)
	return v
}

// rss is the process's current resident size (KiB).
func rss(pid int) int64 { return statusKB(pid, "VmRSS") }

// statusKB is a field of the process's status file in KiB (0 when
// unreadable).
func statusKB(pid int, field string) int64 {
	v, _ := strconv.ParseInt(strings.TrimSuffix(statusField(pid, field), " kB"), 10, 64)
	return v
}

// storeSize is the embedded store's bbolt file and log segments in dir.
func storeSize(dir string) (file, log int64) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), "wal-") {
			log += info.Size()
		} else {
			file += info.Size()
		}
		return nil
	})
	return file, log
}

// scrapeGauge reads one gauge without labels from a gateway's metrics.
func scrapeGauge(ctx context.Context, c *http.Client, admin, name string) (int64, error) {
	b, err := fetchMetrics(ctx, c, admin)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("no %s in the metrics", name)
}

// writeSoakJSON writes the samples and the soak's latencies.
func writeSoakJSON(path string, samples []soakSample, r phaseResult) error {
	b, err := json.MarshalIndent(struct {
		Samples []soakSample `json:"samples"`
		Result  phaseResult  `json:"result"`
	}{samples, r}, "", "  ")
	if err != nil {
		return err
	}
	if path == "-" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
