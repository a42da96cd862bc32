package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// target is one thing under load: a base URL and the processes that serve
// it (the mock always; the proxy when there is one).
type target struct {
	name  string
	url   string
	tag   string // makes the run ids of its workloads its own
	mock  *proc
	proxy *proc // nil for direct
	// gateway: a Haltline target (the first or a -variant), not a
	// reference.
	gateway bool
	// replicas are the target's gateway processes after proxy, when
	// several serve it; urls every process's base URL, proxy's first,
	// and spread how the requests are shared out among them.
	replicas []*proc
	urls     []string
	spread   spread
	// redis is the redis-server the target's gateways keep their state
	// in (-redis). Other targets use it too, so a turn counts its CPU as
	// it counts the mock's: during the target's turns only.
	redis *proc
	// peakKB is each proxy process's peak RSS over the round so far (in
	// procs' order), kept as each turn resets the process's own
	// (startTurn).
	peakKB []int64
}

// procs are the processes that serve the target: none for direct, the
// proxy, and the other replicas of a target served by several.
func (t *target) procs() []*proc {
	if t.proxy == nil {
		return nil
	}
	return append([]*proc{t.proxy}, t.replicas...)
}

// replicaOf is the index in t.urls of the process request i of w goes
// to (see spread).
func (t *target) replicaOf(w *workload, i uint64) int {
	if len(t.urls) < 2 {
		return 0
	}
	slot, step := w.position(i)
	k := slot
	if t.spread == byStep {
		k += uint64(step)
	}
	return int(k % uint64(len(t.urls)))
}

// baseURLs are the base URLs requests are shared out among.
func (t *target) baseURLs() []string {
	if len(t.urls) == 0 {
		return []string{t.url}
	}
	return t.urls
}

// phaseResult is one fixed-rate or closed-loop phase against one target.
type phaseResult struct {
	Requests    int      `json:"requests"`
	Errors      int      `json:"errors"`
	ErrorSample []string `json:"error_sample,omitempty"`
	Unforwarded int64    `json:"unforwarded"` // answered by the proxy without reaching the mock
	Seconds     float64  `json:"seconds"`
	Throughput  float64  `json:"throughput_rps"`
	P50us       float64  `json:"p50_us"`
	P90us       float64  `json:"p90_us"`
	P99us       float64  `json:"p99_us"`
	P999us      float64  `json:"p99_9_us"`
	MaxUs       float64  `json:"max_us"`
	// PeakRSSKB is the proxy's peak RSS over the phase's turns (KiB);
	// GCPauses a gateway's garbage collection pauses in them.
	PeakRSSKB  int64     `json:"peak_rss_kb,omitempty"`
	GCPauses   *gcPauses `json:"gc_pauses,omitempty"`
	ProxyCPUus float64   `json:"proxy_cpu_us_per_req,omitempty"`
	MockCPUus  float64   `json:"mock_cpu_us_per_req"`
	// ProxySwitches is the proxy's context switches per request, over all
	// its threads: how often it blocked or was put off a core. A count,
	// it is steadier than CPU time on a shared machine, whose steal and
	// cache misses stretch the time but not the count.
	ProxySwitches float64        `json:"proxy_switches_per_req,omitempty"`
	RunStates     map[string]int `json:"run_states,omitempty"` // X-Run-State of the answers
	// Runs is how many distinct X-Run-Id the answers carried (gateways
	// only): requests / runs is the steps the gateway saw in a run.
	Runs int `json:"runs,omitempty"`
	// MaxRunStep is the highest X-Run-Step of the answers: a run's steps
	// counted across the processes that served them, where replicas that
	// did not share a run's state would each count their own.
	MaxRunStep int `json:"max_run_step,omitempty"`
	// ReplicaRequests counts the requests sent to each process of a
	// target served by several.
	ReplicaRequests []int `json:"replica_requests,omitempty"`
	// RedisCPUus is the target's redis-server's CPU per request over the
	// target's turns (-redis targets).
	RedisCPUus float64 `json:"redis_cpu_us_per_req,omitempty"`
	// RedisCmds is what each command cost redis-server per request over
	// the target's turns (INFO commandstats).
	RedisCmds map[string]redisCmd `json:"redis_commands,omitempty"`
	// The gateway's own time per call as it reports it (its overhead
	// header: the call's time inside the gateway less the upstream wait),
	// beside the black-box latency; gateways only.
	OwnP50us float64 `json:"own_overhead_p50_us,omitempty"`
	OwnP99us float64 `json:"own_overhead_p99_us,omitempty"`
}

// overheadHeader is the gateway's overhead header (proxy.HeaderOverhead,
// in milliseconds): named here, not imported, so that the harness stays
// black-box.
const overheadHeader = "X-Haltline-Overhead-Ms"

// loadClient is the load generator's HTTP client: keep-alive, a pool large
// enough that no request waits for a connection, no compression.
func loadClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

func targeter(tg *target, w *workload) vegeta.Targeter {
	var urls []string
	for _, base := range tg.baseURLs() {
		urls = append(urls, base+w.path())
	}
	return func(t *vegeta.Target) error {
		i, run, body := w.next()
		t.Method = http.MethodPost
		t.URL = w.requestURL(urls[tg.replicaOf(w, i)], i)
		t.Body = body
		t.Header = w.header(run)
		return nil
	}
}

// cpuSnap holds the CPU time of a target's processes, and the proxy's
// context switches, at one moment; proxy sums every process that serves
// the target.
type cpuSnap struct {
	mock, proxy, redis time.Duration
	proxySwitches      int64
}

func snapCPU(t *target) cpuSnap {
	var s cpuSnap
	s.mock, _ = cpuTime(t.mock.pid())
	for _, p := range t.procs() {
		d, _ := cpuTime(p.pid())
		n, _ := contextSwitches(p.pid())
		s.proxy += d
		s.proxySwitches += n
	}
	if t.redis != nil {
		s.redis, _ = cpuTime(t.redis.pid())
	}
	return s
}

// attack runs the workload against t: at rate req/s (open loop, vegeta's
// constant pacer) or, with rate 0, closed loop with conc workers.
func attack(ctx context.Context, c *http.Client, t *target, w *workload, rate, conc int, dur time.Duration) (phaseResult, error) {
	var acc phaseAcc
	err := acc.attack(ctx, c, t, w, rate, conc, dur)
	return acc.result(t), err
}

// phaseAcc gathers one phase's samples for one target over the turns it
// was measured in (see interleave); result computes its figures from all
// of them at once, so a phase cut into turns is read as one.
type phaseAcc struct {
	lat, own    []time.Duration
	states      map[string]int
	runs        map[string]struct{} // X-Run-Id of the answers
	requests    int
	errors      int
	errSample   []string
	unforwarded int64
	elapsed     time.Duration
	mockCPU     time.Duration // the mock's CPU in the target's turns (others share the mock)
	redisCPU    time.Duration // as the mock's, the target's redis-server's
	redisCmds   redisCounts
	maxStep     int
	replicaReqs []int
	// The proxy's counters at its first turn's start and its last turn's
	// end: its background work (the gateway's checkpoint) may run while
	// other targets take their turns, and is its own.
	proxy0, proxy1 cpuSnap
	turns          int
	peakKB         int64
	gc             *gcPauses
	// onResult, when set, is told of each answer as it arrives (ok: a
	// success), for a soak's samples.
	onResult func(ok bool)
}

// addTurn adds the counters read before and after one turn.
func (a *phaseAcc) addTurn(before, after cpuSnap) {
	a.mockCPU += after.mock - before.mock
	a.redisCPU += after.redis - before.redis
	if a.turns == 0 {
		a.proxy0 = before
	}
	a.proxy1 = after
	a.turns++
}

// attack runs one turn of the phase (see the function attack) and adds
// its samples.
func (a *phaseAcc) attack(ctx context.Context, c *http.Client, t *target, w *workload, rate, conc int, dur time.Duration) error {
	opts := []func(*vegeta.Attacker){vegeta.Client(c), vegeta.KeepAlive(true), vegeta.HTTP2(false), vegeta.Timeout(30 * time.Second)}
	pace := vegeta.Rate{Freq: rate, Per: time.Second}
	if rate == 0 {
		opts = append(opts, vegeta.Workers(uint64(conc)), vegeta.MaxWorkers(uint64(conc)))
		pace = vegeta.Rate{Freq: 0, Per: 0} // as fast as the workers go
	}
	atk := vegeta.NewAttacker(opts...)
	served0, err := servedCount(ctx, c, t.mock.addrURL())
	if err != nil {
		return fmt.Errorf("mock count: %w", err)
	}
	if a.states == nil {
		a.states, a.runs = map[string]int{}, map[string]struct{}{}
	}
	a.lat = slices.Grow(a.lat, max(rate, 1000)*int(dur/time.Second+1))
	probe := startTurn(ctx, c, t)
	var cmds0 redisCounts
	if t.redis != nil {
		cmds0 = readRedisCounts(t.redis)
	}
	cpu0 := snapCPU(t)
	start := time.Now()
	requests, errs := 0, 0
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	bases := t.baseURLs()
	if len(bases) > 1 && a.replicaReqs == nil {
		a.replicaReqs = make([]int, len(bases))
	}
	for res := range atk.Attack(targeter(t, w), pace, dur, t.name) {
		requests++
		if a.replicaReqs != nil {
			for k, b := range bases {
				if strings.HasPrefix(res.URL, b+"/") {
					a.replicaReqs[k]++
				}
			}
		}
		if w.lineage {
			if i, ok := requestIndex(res.URL); ok {
				w.answer(i)
			}
		}
		failed := res.Error != "" || res.Code != http.StatusOK
		if a.onResult != nil {
			a.onResult(!failed)
		}
		if failed {
			errs++
			if len(a.errSample) < 5 {
				msg := res.Error
				if len(res.Body) > 0 {
					msg += ": " + string(res.Body[:min(len(res.Body), 300)])
				}
				a.errSample = append(a.errSample, msg)
			}
			continue
		}
		a.lat = append(a.lat, res.Latency)
		if s := res.Headers.Get("X-Run-State"); s != "" {
			a.states[s]++
		}
		if id := res.Headers.Get("X-Run-Id"); id != "" {
			a.runs[id] = struct{}{}
		}
		if n, err := strconv.Atoi(res.Headers.Get("X-Run-Step")); err == nil {
			a.maxStep = max(a.maxStep, n)
		}
		if ms, err := strconv.ParseFloat(res.Headers.Get(overheadHeader), 64); err == nil {
			a.own = append(a.own, time.Duration(ms*float64(time.Millisecond)))
		}
	}
	a.elapsed += time.Since(start)
	cpu1 := snapCPU(t)
	if cmds0 != nil {
		if cmds1 := readRedisCounts(t.redis); cmds1 != nil {
			if a.redisCmds == nil {
				a.redisCmds = redisCounts{}
			}
			a.redisCmds.add(cmds0, cmds1)
		}
	}
	a.peakKB = max(a.peakKB, probe.end(ctx, &a.gc))
	a.requests += requests
	a.errors += errs
	a.addTurn(cpu0, cpu1)
	if err := ctx.Err(); err != nil {
		return err
	}
	served1, err := servedCount(ctx, c, t.mock.addrURL())
	if err != nil {
		return fmt.Errorf("mock count: %w", err)
	}
	a.unforwarded += int64(requests-errs) - (served1 - served0)
	return nil
}

// result is the phase's figures over every turn added.
func (a *phaseAcc) result(t *target) phaseResult {
	r := phaseResult{Requests: a.requests, Errors: a.errors, ErrorSample: a.errSample, Unforwarded: a.unforwarded, Seconds: a.elapsed.Seconds()}
	if a.elapsed > 0 {
		r.Throughput = float64(len(a.lat)) / a.elapsed.Seconds()
	}
	r.P50us, r.P90us, r.P99us, r.MaxUs = percentiles(a.lat)
	r.P999us = quantile(a.lat, 0.999)
	r.PeakRSSKB, r.GCPauses = a.peakKB, a.gc
	if len(a.own) > 0 {
		r.OwnP50us, _, r.OwnP99us, _ = percentiles(a.own)
	}
	if n := float64(a.requests); n > 0 {
		r.MockCPUus = float64(a.mockCPU.Microseconds()) / n
		if t.proxy != nil {
			r.ProxyCPUus = float64((a.proxy1.proxy - a.proxy0.proxy).Microseconds()) / n
			r.ProxySwitches = float64(a.proxy1.proxySwitches-a.proxy0.proxySwitches) / n
		}
		if t.redis != nil {
			r.RedisCPUus = float64(a.redisCPU.Microseconds()) / n
			r.RedisCmds = a.redisCmds.perRequest(a.requests)
		}
	}
	r.MaxRunStep, r.ReplicaRequests = a.maxStep, a.replicaReqs
	if len(a.states) > 0 {
		r.RunStates = a.states
	}
	r.Runs = len(a.runs)
	return r
}

func (s *proc) addrURL() string { return "http://" + s.addr }

// percentiles returns p50, p90, p99 and max in microseconds; d is left
// sorted.
func percentiles(d []time.Duration) (p50, p90, p99, mx float64) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	return quantile(d, 0.50), quantile(d, 0.90), quantile(d, 0.99), quantile(d, 1)
}

// quantile is the q-quantile of sorted durations, in microseconds.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return float64(sorted[i].Nanoseconds()) / 1e3
}

// satLevel is one concurrency level of the saturation search.
type satLevel struct {
	Concurrency int         `json:"concurrency"`
	Result      phaseResult `json:"result"`
}

// saturation is the closed-loop search for the highest throughput, then
// its best concurrency held (Held): the figures are the held ones when it
// was, else the search's best level's.
type saturation struct {
	Levels        []satLevel          `json:"levels"`
	PeakRPS       float64             `json:"peak_rps"`
	PeakConc      int                 `json:"peak_concurrency"`
	ProxyCPUus    float64             `json:"proxy_cpu_us_per_req"`
	ProxySwitches float64             `json:"proxy_switches_per_req,omitempty"`
	MockCPUus     float64             `json:"mock_cpu_us_per_req"`
	RedisCPUus    float64             `json:"redis_cpu_us_per_req,omitempty"`
	RedisCmds     map[string]redisCmd `json:"redis_commands,omitempty"`
	// Held is PeakConc held for -sat-hold; SearchRPS and SearchCPUus are
	// the search's best level (the figures above with -sat-hold 0).
	Held        *satLevel `json:"held,omitempty"`
	SearchRPS   float64   `json:"search_peak_rps,omitempty"`
	SearchCPUus float64   `json:"search_proxy_cpu_us_per_req,omitempty"`
	Errors      int       `json:"errors"`
	Requests    int       `json:"requests"`
	ErrorSample []string  `json:"error_sample,omitempty"`
	// Over every level and the hold: the proxy's peak RSS (KiB), a
	// gateway's GC pauses.
	PeakRSSKB int64     `json:"peak_rss_kb,omitempty"`
	GCPauses  *gcPauses `json:"gc_pauses,omitempty"`
}

// saturate doubles the number of closed-loop workers until throughput stops
// growing (two levels in a row that do not beat the best by 3 % end it,
// once minConc workers were reached), then holds the best level's
// concurrency for hold (none when 0).
//
// The hold is what the figures are read over. A level of the search is
// shorter than the gateway's checkpoint period (8 s), so one level bears
// a checkpoint's CPU and the next none, and the best level found was more
// often one without: its figures were those of a gateway that writes
// nothing into its store file. A hold of two periods or more bears them as
// a sustained load does.
func saturate(ctx context.Context, c *http.Client, t *target, w *workload, minConc, maxConc int, step, hold time.Duration) (saturation, error) {
	var s saturation
	flat := 0
	for conc := 1; conc <= maxConc; conc *= 2 {
		r, err := attack(ctx, c, t, w, 0, conc, step)
		if err != nil {
			return s, err
		}
		s.Levels = append(s.Levels, satLevel{Concurrency: conc, Result: r})
		s.count(r)
		ends := searchEnds(&flat, r.Throughput, s.PeakRPS, conc, minConc)
		if r.Throughput > s.PeakRPS {
			s.PeakConc = conc
			s.take(r)
		}
		if ends {
			break
		}
	}
	if hold > 0 && s.PeakConc > 0 {
		r, err := attack(ctx, c, t, w, 0, s.PeakConc, hold)
		if err != nil {
			return s, err
		}
		s.Held = &satLevel{Concurrency: s.PeakConc, Result: r}
		s.count(r)
		s.SearchRPS, s.SearchCPUus = s.PeakRPS, s.ProxyCPUus
		s.take(r)
	}
	if len(s.ErrorSample) > 5 {
		s.ErrorSample = s.ErrorSample[:5]
	}
	return s, nil
}

// searchEnds reports whether a search ends after a level of conc workers
// that did rps against the best level's best: flat counts the levels in a
// row that did not beat the best by 3 %, two of which end it once minConc
// workers were reached.
func searchEnds(flat *int, rps, best float64, conc, minConc int) bool {
	if rps > best*1.03 {
		*flat = 0
	} else {
		*flat++
	}
	return *flat >= 2 && conc >= minConc
}

// count adds a level's (or the hold's) requests and errors.
func (s *saturation) count(r phaseResult) {
	s.Errors += r.Errors
	s.Requests += r.Requests
	s.ErrorSample = append(s.ErrorSample, r.ErrorSample...)
	s.PeakRSSKB = max(s.PeakRSSKB, r.PeakRSSKB)
	s.GCPauses = s.GCPauses.merge(r.GCPauses)
}

// take makes r's figures the saturation's.
func (s *saturation) take(r phaseResult) {
	s.PeakRPS = r.Throughput
	s.ProxyCPUus, s.MockCPUus, s.ProxySwitches, s.RedisCPUus, s.RedisCmds = r.ProxyCPUus, r.MockCPUus, r.ProxySwitches, r.RedisCPUus, r.RedisCmds
}

// streamResult is the streamed-answer phase: one call at a time, so time to
// first byte is the proxy's own delay and not queueing.
type streamResult struct {
	Requests    int       `json:"requests"`
	Errors      int       `json:"errors"`
	ErrorSample []string  `json:"error_sample,omitempty"`
	TTFBp50us   float64   `json:"ttfb_p50_us"`
	TTFBp99us   float64   `json:"ttfb_p99_us"`
	TTFBp999us  float64   `json:"ttfb_p99_9_us"`
	TotalP50us  float64   `json:"total_p50_us"`
	TotalP99us  float64   `json:"total_p99_us"`
	TotalP999us float64   `json:"total_p99_9_us"`
	PeakRSSKB   int64     `json:"peak_rss_kb,omitempty"`
	GCPauses    *gcPauses `json:"gc_pauses,omitempty"`
}

// streams measures n streamed calls: time to the first byte of the body (the
// first event) and to its end.
func streams(ctx context.Context, c *http.Client, t *target, w *workload, n int) (streamResult, error) {
	var acc streamAcc
	err := acc.streams(ctx, c, t, w, n)
	return acc.result(), err
}

// streamAcc gathers the streamed calls of one target over its turns, as
// phaseAcc does for the fixed-rate phases.
type streamAcc struct {
	ttfb, total []time.Duration
	requests    int
	errors      int
	errSample   []string
	peakKB      int64
	gc          *gcPauses
}

// streams measures n more streamed calls, one at a time.
func (a *streamAcc) streams(ctx context.Context, c *http.Client, t *target, w *workload, n int) error {
	end := []byte("data: [DONE]")
	if w.api == apiAnthropic {
		end = []byte(`"type":"message_stop"`)
	}
	buf := make([]byte, 32<<10)
	probe := startTurn(ctx, c, t)
	defer func() { a.peakKB = max(a.peakKB, probe.end(ctx, &a.gc)) }()
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		a.requests++
		first, all, err := oneStream(ctx, c, t, w, buf, end)
		if err != nil {
			a.errors++
			if len(a.errSample) < 5 {
				a.errSample = append(a.errSample, err.Error())
			}
			continue
		}
		a.ttfb = append(a.ttfb, first)
		a.total = append(a.total, all)
	}
	return nil
}

func (a *streamAcc) result() streamResult {
	r := streamResult{Requests: a.requests, Errors: a.errors, ErrorSample: a.errSample}
	r.TTFBp50us, _, r.TTFBp99us, _ = percentiles(a.ttfb)
	r.TotalP50us, _, r.TotalP99us, _ = percentiles(a.total)
	r.TTFBp999us, r.TotalP999us = quantile(a.ttfb, 0.999), quantile(a.total, 0.999)
	r.PeakRSSKB, r.GCPauses = a.peakKB, a.gc
	return r
}

func oneStream(ctx context.Context, c *http.Client, t *target, w *workload, buf, end []byte) (first, all time.Duration, err error) {
	i, run, body := w.next() // one-step runs: nothing to wait for
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.baseURLs()[t.replicaOf(w, i)]+w.path(), bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header = w.header(run)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var tail []byte // the last bytes read, to find the end marker
	for {
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			if first == 0 {
				first = time.Since(start)
			}
			tail = append(tail, buf[:k]...)
			if len(tail) > 256 {
				tail = tail[len(tail)-256:]
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, 0, rerr
		}
	}
	all = time.Since(start)
	if !bytes.Contains(tail, end) {
		return 0, 0, errors.New("stream ended without its final event")
	}
	return first, all, nil
}
