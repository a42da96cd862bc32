package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Phase names, as they appear in the JSON.
const (
	phase200   = "openai_200rps_2KB"
	phase1000  = "openai_1000rps_2KB"
	phase200KB = "openai_1000rps_200KB"
	phaseAnth  = "anthropic_1000rps_2KB"
	// phaseLog: the agent loop's tool results are 64 KB of JSON log lines
	// (escape-dense text the gateway validates, and the loop guard hashes).
	phaseLog = "openai_1000rps_64KB_log_output"
	phaseSat = "saturation"
)

// phaseNames are the phases -only selects from.
var phaseNames = []string{phase200, phase1000, phase200KB, phaseLog, phaseAnth, "stream_" + apiOpenAI, "stream_" + apiAnthropic, phaseSat}

// runs reports whether -only lets phase run.
func (o options) runs(phase string) bool { return o.only == nil || o.only.MatchString(phase) }

// targetResult is everything measured on one target in one round.
type targetResult struct {
	Phases     map[string]phaseResult  `json:"phases"`
	Saturation saturation              `json:"saturation"`
	Streams    map[string]streamResult `json:"streams"`
	PeakRSSKB  int64                   `json:"peak_rss_kb,omitempty"` // the proxy process (the highest of several); absent for direct
	// ReplicaPeakRSSKB is each process's peak RSS, of a target served by
	// several.
	ReplicaPeakRSSKB []int64 `json:"replica_peak_rss_kb,omitempty"`
	LogErrors        int     `json:"log_errors,omitempty"` // error lines in the proxy's log
	// StoredRuns counts the runs in a gateway's embedded store once it
	// stopped (nil: none was opened, as with the Redis store).
	StoredRuns *int   `json:"stored_runs,omitempty"`
	Crashed    string `json:"crashed,omitempty"`
	LogTail    string `json:"log_tail,omitempty"` // the proxy's last log lines, kept when a request failed
}

// failed reports whether any request to the target failed.
func (t *targetResult) failed() bool {
	n := t.Saturation.Errors
	for _, p := range t.Phases {
		n += p.Errors
	}
	for _, s := range t.Streams {
		n += s.Errors
	}
	return n > 0
}

type round struct {
	Targets     map[string]*targetResult `json:"targets"`
	MockRSSKB   int64                    `json:"mock_peak_rss_kb"`
	RedisRSSKB  int64                    `json:"redis_peak_rss_kb,omitempty"` // -redis: the round's redis-server
	Placement   []string                 `json:"placement"`
	TargetOrder []string                 `json:"target_order"`
	// What the harness did not have of the CPUs (see machineShare), over
	// the round and in each phase; nil: not measured.
	Machine      *machineShare            `json:"machine,omitempty"`
	PhaseMachine map[string]*machineShare `json:"phase_machine,omitempty"`
}

// run measures every target for o.rounds rounds and prints the report.
func run(ctx context.Context, o options, out io.Writer) (*report, error) {
	started := time.Now()
	pl := newPlacement(o.pin)
	if err := pl.pinSelf(); err != nil {
		pl.enabled = false
		pl.note = "pinning failed: " + err.Error()
	}
	dir, err := os.MkdirTemp("", "haltline-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	// Resolved before the gateway build so that a wrong -nginx fails at once.
	ngx, ngxNote, err := findNginx(o.nginx)
	if err != nil {
		return nil, err
	}
	if ngx != nil {
		ngxNote = ngx.version + " (" + ngx.path + ")"
	}
	redisBin, err := findRedis(o.redis)
	if err != nil {
		return nil, err
	}
	bin := o.gatewayBin
	if bin == "" {
		fmt.Fprintln(out, "building the gateway (go build ./cmd/gateway)…")
		if bin, err = buildGateway(ctx, dir, false); err != nil {
			return nil, err
		}
	}
	gateways := []variant{{name: "haltline", args: o.gatewayArgs}}
	gateways = append(gateways, o.variants...)
	if o.decompose {
		fmt.Fprintln(out, "building the gateway in parts (go build -overlay with bench/testdata/decompose)…")
		parts, err := buildGateway(ctx, dir, true)
		if err != nil {
			return nil, err
		}
		gateways = append(gateways, decomposed(parts, o.gatewayArgs)...)
	}
	redisNote := ""
	if redisBin != "" {
		gateways = append(gateways, redisVariants(o.gatewayArgs)...)
		redisNote = redisVersion(redisBin)
	}

	if o.pprofDir != "" {
		if err := os.MkdirAll(o.pprofDir, 0o755); err != nil {
			return nil, err
		}
	}
	rep := newReport(o, pl, gateways, ngx != nil, ngxNote)
	rep.Meta.Redis = redisNote
	fmt.Fprintf(out, "placement: %s\n", pl.method())
	fmt.Fprintf(out, "nginx: %s\n", ngxNote)
	for i := 0; i < o.rounds; i++ {
		fmt.Fprintf(out, "round %d of %d\n", i+1, o.rounds)
		rd, err := runRound(ctx, o, &pl, dir, bin, redisBin, ngx, gateways, i, out)
		if rd != nil {
			rep.Rounds = append(rep.Rounds, rd)
		}
		if err != nil {
			return rep, err
		}
	}
	rep.Meta.Seconds = time.Since(started).Seconds()
	rep.summarise()
	rep.markdown(out)
	if o.pprofDir != "" {
		fmt.Fprintf(out, "\nThe gateways' CPU profiles, taken while they were measured, are in %s (go tool pprof -top %s).\n",
			o.pprofDir, filepath.Join(o.pprofDir, gateways[0].name+"-"+phaseSat+"-*.pprof"))
	}
	if o.jsonOut != "" {
		if err := rep.writeJSON(o.jsonOut, out); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func runRound(ctx context.Context, o options, pl *placement, dir, bin, redisBin string, ngx *nginxInfo, gateways []variant, idx int, out io.Writer) (*round, error) {
	rd := &round{Targets: map[string]*targetResult{}}
	rdir, err := os.MkdirTemp(dir, "round-")
	if err != nil {
		return nil, err
	}
	mock, err := startRole(ctx, pl, rdir, "mock", "-steps", strconv.Itoa(o.steps),
		"-chunks", strconv.Itoa(o.chunks), "-chunk-gap", o.chunkGap.String(), "-first-event-gap", o.firstGap.String())
	if err != nil {
		return nil, err
	}
	defer mock.stop()
	rd.Placement = append(rd.Placement, placementLine("load generator", os.Getpid()), placementLine("mock", mock.pid()))
	client := loadClient()
	defer client.CloseIdleConnections()
	// One redis-server a round, shared by the Redis targets (each in a
	// database of its own), on the servers' CPU with the gateways.
	var redis *proc
	if redisBin != "" {
		if redis, err = startRedis(ctx, pl, rdir, redisBin); err != nil {
			return nil, err
		}
		defer redis.stop()
		rd.Placement = append(rd.Placement, placementLine("redis-server", redis.pid()))
	}

	type starter struct {
		name  string
		start func() ([]*proc, error)
	}
	one := func(p *proc, err error) ([]*proc, error) {
		if p == nil {
			return nil, err
		}
		return []*proc{p}, err
	}
	starters := []starter{
		{"direct", func() ([]*proc, error) { return nil, nil }},
		{"floor", func() ([]*proc, error) {
			return one(startRole(ctx, pl, rdir, "floor", "-upstream", mock.addrURL()))
		}},
	}
	if ngx != nil {
		starters = append(starters, starter{"nginx", func() ([]*proc, error) {
			return one(startNginx(ctx, pl, rdir, ngx, mock.addr))
		}})
	}
	byName := map[string]variant{}
	for _, g := range gateways {
		byName[g.name] = g
		starters = append(starters, starter{g.name, func() ([]*proc, error) { return startGateways(ctx, pl, rdir, bin, mock, redis, g) }})
	}
	// Every target is up for the whole round, idle but for its own turns:
	// the phases interleave them (see interleave).
	var targets []*target
	defer func() {
		for _, t := range targets {
			for _, p := range t.procs() {
				p.stop()
			}
		}
	}()
	for _, st := range starters {
		ps, err := st.start()
		if err != nil {
			return rd, err
		}
		g, isGateway := byName[st.name]
		t := &target{name: st.name, mock: mock, url: mock.addrURL(), tag: fmt.Sprintf("r%d%s", idx, st.name), gateway: isGateway, spread: g.spread}
		if g.redisDB > 0 {
			t.redis = redis
		}
		if len(ps) > 0 {
			t.proxy, t.replicas, t.url = ps[0], ps[1:], ps[0].addrURL()
		}
		for k, p := range ps {
			name := st.name
			if len(ps) > 1 {
				name += fmt.Sprintf(" #%d", k+1)
				t.urls = append(t.urls, p.addrURL())
			}
			rd.Placement = append(rd.Placement, placementLine(name, p.pid()))
		}
		targets = append(targets, t)
		rd.TargetOrder = append(rd.TargetOrder, st.name)
		rd.Targets[st.name] = &targetResult{Phases: map[string]phaseResult{}, Streams: map[string]streamResult{}}
	}
	probe := newMachineProbe(pl, func() []int {
		pids := []int{mock.pid()}
		if redis != nil {
			pids = append(pids, redis.pid())
		}
		for _, t := range targets {
			for _, p := range t.procs() {
				pids = append(pids, p.pid())
			}
		}
		return pids
	})
	rd.PhaseMachine = map[string]*machineShare{}
	rd.Machine, err = probe.around(out, "the round", func() error { return measureRound(ctx, o, client, targets, rd, probe, idx, out) })
	for _, t := range targets {
		procs := t.procs()
		if len(procs) == 0 {
			continue
		}
		res := rd.Targets[t.name]
		for k, p := range procs {
			peak := peakRSS(p.pid())
			if k < len(t.peakKB) {
				peak = max(peak, t.peakKB[k])
			}
			res.PeakRSSKB = max(res.PeakRSSKB, peak)
			if len(procs) > 1 {
				res.ReplicaPeakRSSKB = append(res.ReplicaPeakRSSKB, peak)
			}
			if done, perr := p.exited(); done {
				res.Crashed += fmt.Sprintf("%s exited during the round: %v\n%s", p.name, perr, p.tail(30))
			}
			p.stop()
			res.LogErrors += countErrorLines(p.log)
		}
		if t.proxy.data != "" && t.redis == nil {
			res.StoredRuns = storedRuns(t.proxy.data)
		}
		if res.failed() {
			for _, p := range procs {
				res.LogTail += p.tail(20)
			}
		}
	}
	rd.MockRSSKB = peakRSS(mock.pid())
	if redis != nil {
		rd.RedisRSSKB = peakRSS(redis.pid())
	}
	return rd, err
}

// startGateways starts the processes of gateway target g: one, or
// g.replicas, on the round's redis-server when g is on Redis.
func startGateways(ctx context.Context, pl *placement, dir, bin string, mock, redis *proc, g variant) ([]*proc, error) {
	if g.bin != "" {
		bin = g.bin
	}
	args := strings.Fields(g.args)
	if g.redisDB > 0 {
		args = append(args, "--redis-url", redisURL(redis, g.redisDB))
	}
	var ps []*proc
	for k := range max(g.replicas, 1) {
		name := g.name
		if g.replicas > 1 {
			name += "-" + strconv.Itoa(k+1)
		}
		p, err := startGateway(ctx, pl, dir, name, bin, mock.addrURL(), args, g.env)
		if err != nil {
			for _, q := range ps {
				q.stop()
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func placementLine(name string, pid int) string {
	return fmt.Sprintf("%s (pid %d): CPUs %s", name, pid, statusField(pid, "Cpus_allowed_list"))
}

// countErrorLines counts the error-level lines of a JSON or text log, or of
// nginx's error log.
func countErrorLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), `"level":"ERROR"`) + strings.Count(string(b), "level=ERROR") + nginxErrorLines(b)
}

// interleave runs one phase on n targets in the given number of turns
// each, the targets' order rotating from one round of turns to the next:
// turn(i, s) is target i's turn in round s. A slow minute of a shared
// machine then falls on every target's samples alike, where a phase run
// whole on one target after another put minutes between the floor's
// figure and the gateway's it is divided by.
func interleave(ctx context.Context, n, turns int, turn func(i, s int) error) error {
	for s := range turns {
		for k := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := turn((k+s)%n, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// measureRound runs every phase on every target, interleaved.
func measureRound(ctx context.Context, o options, c *http.Client, targets []*target, rd *round, probe machineProbe, idx int, out io.Writer) error {
	wl := func(t *target, api string, size int, stream bool, name string) *workload {
		return &workload{api: api, size: size, steps: o.steps, slots: o.slots, stream: stream, tag: t.tag + "-" + name, lineage: o.lineage, toolOutput: name == phaseLog}
	}
	prof := newProfiles(o.pprofDir, idx)
	// Warm-up: connections, the proxies' pools and heaps, both APIs.
	for _, t := range targets {
		if _, err := attack(ctx, c, t, wl(t, apiOpenAI, size2KB, false, "warm"), 500, 0, o.warmup); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if o.anthropic {
			if _, err := attack(ctx, c, t, wl(t, apiAnthropic, size2KB, false, "warma"), 500, 0, o.warmup/2); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
	}
	phases := []struct {
		name string
		api  string
		size int
		rate int
	}{
		{phase200, apiOpenAI, size2KB, 200},
		{phase1000, apiOpenAI, size2KB, 1000},
		{phase200KB, apiOpenAI, size200KB, 1000},
		{phaseLog, apiOpenAI, size2KB, 1000},
	}
	if o.anthropic {
		phases = append(phases, struct {
			name string
			api  string
			size int
			rate int
		}{phaseAnth, apiAnthropic, size2KB, 1000})
	}
	for _, ph := range phases {
		if !o.runs(ph.name) {
			continue
		}
		accs := make([]phaseAcc, len(targets))
		wls := make([]*workload, len(targets))
		for i, t := range targets {
			wls[i] = wl(t, ph.api, ph.size, false, ph.name) // one per target: its runs go on across turns
		}
		var err error
		rd.PhaseMachine[ph.name], err = probe.around(out, ph.name, func() error {
			return interleave(ctx, len(targets), o.turns, func(i, _ int) error {
				t, d := targets[i], o.duration/time.Duration(o.turns)
				if err := prof.during(ctx, t, ph.name, d, func() error { return accs[i].attack(ctx, c, t, wls[i], ph.rate, 0, d) }); err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				quiesce(ctx, t)
				return nil
			})
		})
		if err != nil {
			return err
		}
		for i, t := range targets {
			r := accs[i].result(t)
			rd.Targets[t.name].Phases[ph.name] = r
			fmt.Fprintf(out, "  %-9s %-22s %6d req  %3d err  p50 %7.0f µs  p99 %7.0f µs  p99.9 %7.0f µs  proxy CPU %5.1f µs/req, %4.1f switches/req%s%s%s\n",
				t.name, ph.name, r.Requests, r.Errors, r.P50us, r.P99us, r.P999us, r.ProxyCPUus, r.ProxySwitches, redisNote(t, r), memNote(r.PeakRSSKB, r.GCPauses), errNote(r.ErrorSample))
		}
	}
	apis := []string{apiOpenAI}
	if o.anthropic {
		apis = append(apis, apiAnthropic)
	}
	for _, api := range apis {
		if !o.runs("stream_" + api) {
			continue
		}
		accs := make([]streamAcc, len(targets))
		wls := make([]*workload, len(targets))
		for i, t := range targets {
			wls[i] = wl(t, api, size2KB, true, "stream-"+api)
		}
		var err error
		rd.PhaseMachine["stream_"+api], err = probe.around(out, "stream_"+api, func() error {
			return interleave(ctx, len(targets), o.turns, func(i, s int) error {
				// The o.streams calls shared out over the turns.
				n := o.streams*(s+1)/o.turns - o.streams*s/o.turns
				if err := prof.during(ctx, targets[i], "stream_"+api, time.Second, func() error { return accs[i].streams(ctx, c, targets[i], wls[i], n) }); err != nil {
					return fmt.Errorf("%s: %w", targets[i].name, err)
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		for i, t := range targets {
			r := accs[i].result()
			rd.Targets[t.name].Streams[api] = r
			fmt.Fprintf(out, "  %-9s %-22s %6d req  %3d err  TTFB p50 %6.0f µs  p99.9 %6.0f µs  total p50 %7.0f µs%s%s\n",
				t.name, "stream_"+api+"_"+strconv.Itoa(o.chunks), r.Requests, r.Errors, r.TTFBp50us, r.TTFBp999us, r.TotalP50us, memNote(r.PeakRSSKB, r.GCPauses), errNote(r.ErrorSample))
		}
	}
	if !o.runs(phaseSat) {
		return nil
	}
	// The saturation search is not cut into turns (its levels depend on
	// the last one's result), but the targets' searches follow each other
	// (see satOrder).
	var err error
	rd.PhaseMachine[phaseSat], err = probe.around(out, phaseSat, func() error {
		for _, t := range satOrder(targets, idx) {
			// One workload for every level: its runs go on from one level
			// to the next, as a fixed-rate phase's go on across turns,
			// instead of leaving up to -slots unfinished runs per level in
			// the gateway (until their deadline), a heap that would be
			// the harness's doing.
			var sat saturation
			err := prof.during(ctx, t, phaseSat, o.satStep, func() error {
				var err error
				sat, err = saturate(ctx, c, t, wl(t, apiOpenAI, size2KB, false, "sat"), o.satMin, o.satMax, o.satStep, o.satHold)
				return err
			})
			rd.Targets[t.name].Saturation = sat
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			held := ""
			if sat.Held != nil {
				held = fmt.Sprintf(" (held %.0f s; the search's best %.0f req/s, %.1f µs/req)", sat.Held.Result.Seconds, sat.SearchRPS, sat.SearchCPUus)
			}
			fmt.Fprintf(out, "  %-9s %-22s %6d req  %3d err  peak %7.0f req/s at %d workers, proxy CPU %5.1f µs/req, %4.1f switches/req, mock %5.1f µs/req%s%s%s%s\n",
				t.name, "saturation", sat.Requests, sat.Errors, sat.PeakRPS, sat.PeakConc, sat.ProxyCPUus, sat.ProxySwitches, sat.MockCPUus, redisNote(t, phaseResult{RedisCPUus: sat.RedisCPUus}), held, memNote(sat.PeakRSSKB, sat.GCPauses), errNote(sat.ErrorSample))
			quiesce(ctx, t)
		}
		return nil
	})
	return err
}

// memNote is a phase's peak RSS and GC pauses, for the per-phase lines.
func memNote(peakKB int64, gc *gcPauses) string {
	s := ""
	if peakKB > 0 {
		s += fmt.Sprintf(", peak RSS %.0f MiB", float64(peakKB)/1024)
	}
	if gc != nil {
		s += fmt.Sprintf(", %d GC pauses ≤ %s µs", gc.Count, num(gc.longest()))
	}
	return s
}

// redisNote is a Redis target's redis-server CPU and, for a target of
// several processes, the requests each was sent, for the per-phase lines.
func redisNote(t *target, r phaseResult) string {
	s := ""
	if t.redis != nil {
		s += fmt.Sprintf(", redis-server %5.1f µs/req", r.RedisCPUus)
	}
	if len(r.ReplicaRequests) > 1 {
		s += fmt.Sprintf(", requests by process %v", r.ReplicaRequests)
	}
	return s
}

func errNote(sample []string) string {
	if len(sample) == 0 {
		return ""
	}
	return "  first error: " + sample[0]
}

// satOrder is the order of round idx's saturation searches: the
// references first, in their order, then the gateways, their order
// rotating from round to round. A search meets what the one before it
// left running (a gateway's store checkpoints what its search wrote
// within 8 s; its ended runs leave memory), so no reference's search —
// the throughput a gateway's is divided by — follows a gateway's, and in
// as many rounds as there are gateways each takes each of their places
// once.
func satOrder(targets []*target, idx int) []*target {
	var refs, gws []*target
	for _, t := range targets {
		if t.gateway {
			gws = append(gws, t)
		} else {
			refs = append(refs, t)
		}
	}
	for k := range gws {
		refs = append(refs, gws[(k+idx)%len(gws)])
	}
	return refs
}

// goVersion is the toolchain the harness was built with.
func goVersion() string { return runtime.Version() }

// quiesce waits (at most 15 s) until the target's processes are idle: a
// phase that overloaded a target (the 200 KB one can) leaves a backlog,
// and the next phase must not measure the end of it.
func quiesce(ctx context.Context, t *target) {
	pids := []int{t.mock.pid()}
	if t.redis != nil {
		pids = append(pids, t.redis.pid())
	}
	for _, p := range t.procs() {
		pids = append(pids, p.pid())
	}
	busy := func() time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			if d, err := cpuTime(pid); err == nil {
				sum += d
			}
		}
		return sum
	}
	const tick = 500 * time.Millisecond // /proc counts CPU in 10 ms ticks
	deadline := time.Now().Add(15 * time.Second)
	last := busy()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(tick)
		now := busy()
		if now-last < tick/20 { // under 5 % of a core
			return
		}
		last = now
	}
}
