package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type meta struct {
	Date      string  `json:"date"`
	NProc     int     `json:"nproc"`
	CPUModel  string  `json:"cpu_model"`
	GoVersion string  `json:"go_version"`
	Command   string  `json:"command"`
	Placement string  `json:"placement"`
	Rounds    int     `json:"rounds"`
	Short     bool    `json:"short"`
	Duration  string  `json:"phase_duration"`
	Turns     int     `json:"turns_per_phase"` // each target's turns in a phase, targets alternating
	Steps     int     `json:"steps_per_run"`
	Slots     int     `json:"concurrent_runs"`
	Lineage   bool    `json:"lineage,omitempty"` // -lineage: no X-Run-Id sent
	Chunks    int     `json:"stream_chunks"`
	FirstGap  string  `json:"stream_first_event_gap"` // the mock's pause after a stream's first event
	SatHold   string  `json:"saturation_hold"`        // the search's best concurrency held this long; "0s": not held
	Seconds   float64 `json:"seconds"`
	Note      string  `json:"note"`
	Nginx     string  `json:"nginx"`                 // the reference binary, or why it was not measured
	Redis     string  `json:"redis,omitempty"`       // -redis: the redis-server of the Redis targets
	Only      string  `json:"only_phases,omitempty"` // -only: the other phases did not run
}

// summary holds one target's figures: medians over rounds; overheads are
// against direct and ratios against the floor, both taken within a round.
type summary struct {
	P50us  map[string]float64 `json:"p50_us"`
	P99us  map[string]float64 `json:"p99_us"`
	P999us map[string]float64 `json:"p99_9_us"`
	// By phase (the fixed-rate ones, stream_API and saturation): the
	// proxy's peak RSS (KiB), a gateway's GC pauses and the longest
	// pause's bucket bound (µs).
	PhaseRSSKB    map[string]float64 `json:"phase_peak_rss_kb,omitempty"`
	GCPauses      map[string]float64 `json:"phase_gc_pauses,omitempty"`
	GCMaxPauseUs  map[string]float64 `json:"phase_gc_max_pause_us,omitempty"`
	AddedP50us    map[string]float64 `json:"added_p50_us,omitempty"`
	AddedP99us    map[string]float64 `json:"added_p99_us,omitempty"`
	OwnP50us      map[string]float64 `json:"own_overhead_p50_us,omitempty"` // gateways: their own report
	OwnP99us      map[string]float64 `json:"own_overhead_p99_us,omitempty"`
	RatioP50      map[string]float64 `json:"added_p50_vs_floor,omitempty"`
	RatioP99      map[string]float64 `json:"added_p99_vs_floor,omitempty"`
	CPU1000us     float64            `json:"proxy_cpu_us_per_req_1000rps,omitempty"`
	SatRPS        float64            `json:"saturation_rps"`
	SatRatio      float64            `json:"saturation_vs_floor,omitempty"`
	SatCPUus      float64            `json:"proxy_cpu_us_per_req_saturation,omitempty"`
	SatMockCPUus  float64            `json:"mock_cpu_us_per_req_saturation"`
	Switches1000  float64            `json:"proxy_switches_per_req_1000rps,omitempty"`
	SatSwitches   float64            `json:"proxy_switches_per_req_saturation,omitempty"`
	TTFBus        map[string]float64 `json:"stream_ttfb_p50_us"`
	AddedTTFBus   map[string]float64 `json:"stream_added_ttfb_p50_us,omitempty"`
	TTFBRatio     map[string]float64 `json:"stream_added_ttfb_vs_floor,omitempty"`
	TTFBNginx     map[string]float64 `json:"stream_added_ttfb_vs_nginx,omitempty"` // gateways, when nginx was measured
	StreamTotalUs map[string]float64 `json:"stream_total_p50_us"`
	AddedTotalUs  map[string]float64 `json:"stream_added_total_p50_us,omitempty"`
	PeakRSSKB     float64            `json:"peak_rss_kb,omitempty"`
	// ReplicaPeakRSSKB is each process's peak RSS, of a target served by
	// several; PeakRSSKB is then the highest.
	ReplicaPeakRSSKB []float64 `json:"replica_peak_rss_kb,omitempty"`
	// Targets on Redis: redis-server's CPU per request over the target's
	// turns, and the target's p50 over the embedded store's (haltline's)
	// in the same round.
	Redis1000us       float64 `json:"redis_cpu_us_per_req_1000rps,omitempty"`
	SatRedisCPUus     float64 `json:"redis_cpu_us_per_req_saturation,omitempty"`
	OverEmbeddedP50us float64 `json:"p50_over_embedded_us_1000rps,omitempty"`
	// What each command cost redis-server per request, over the target's
	// turns at 1,000 req/s and over its saturation hold.
	RedisCmds1000 map[string]redisCmd `json:"redis_commands_1000rps,omitempty"`
	SatRedisCmds  map[string]redisCmd `json:"redis_commands_saturation,omitempty"`
	Requests      int                 `json:"requests"`
	Errors        int                 `json:"errors"`
	Unforwarded   int64               `json:"unforwarded"`
	RunStates     map[string]int      `json:"run_states,omitempty"`
	// Runs is the distinct X-Run-Id of the fixed-rate answers, RunRequests
	// the requests of the phases that counted them (gateways only).
	Runs        int `json:"runs,omitempty"`
	RunRequests int `json:"run_requests,omitempty"`
}

type check struct {
	Target    string  `json:"target"`
	Measure   string  `json:"measure"`
	Value     float64 `json:"value"`
	Limit     string  `json:"limit"`
	Met       bool    `json:"met"`
	Shortfall string  `json:"shortfall,omitempty"`
}

type report struct {
	Meta    meta                `json:"meta"`
	Summary map[string]*summary `json:"summary"`
	Checks  []check             `json:"checks"`
	Rounds  []*round            `json:"rounds"`
	// Machine is the rounds' median share of the CPUs the harness did not
	// have (see machineShare).
	Machine *machineShare `json:"machine,omitempty"`
	// RedisRSSKB is the rounds' median peak RSS of redis-server (-redis).
	RedisRSSKB float64 `json:"redis_peak_rss_kb,omitempty"`
	targets    []string
	gateways   []string
	variants   map[string]variant // the gateways, by name
	nginx      bool               // nginx is among the targets
	apis       []string
	phases     []string
	opts       options
}

func newReport(o options, pl placement, gateways []variant, nginx bool, nginxNote string) *report {
	r := &report{Meta: meta{
		Date:      time.Now().UTC().Format("2006-01-02"),
		NProc:     runtime.NumCPU(),
		CPUModel:  cpuModel(),
		GoVersion: goVersion(),
		Command:   o.command,
		Placement: pl.method(),
		Rounds:    o.rounds,
		Short:     o.short,
		Duration:  o.duration.String(),
		Turns:     o.turns,
		Steps:     o.steps,
		Slots:     o.slots,
		Lineage:   o.lineage,
		Chunks:    o.chunks,
		FirstGap:  o.firstGap.String(),
		SatHold:   o.satHold.String(),
		Note:      "a shared VM: the figures move with what the hypervisor and other processes take of the CPUs (measured per round: machine)",
		Nginx:     nginxNote,
	}, opts: o}
	if o.only != nil {
		r.Meta.Only = o.only.String()
	}
	r.targets = []string{"direct", "floor"}
	if nginx {
		r.targets = append(r.targets, "nginx")
		r.nginx = true
	}
	r.variants = map[string]variant{}
	for _, g := range gateways {
		r.targets = append(r.targets, g.name)
		r.gateways = append(r.gateways, g.name)
		r.variants[g.name] = g
	}
	r.apis = []string{apiOpenAI}
	r.phases = []string{phase200, phase1000, phase200KB, phaseLog}
	if o.anthropic {
		r.apis = append(r.apis, apiAnthropic)
		r.phases = append(r.phases, phaseAnth)
	}
	return r
}

func median(v []float64) float64 {
	v = slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) })
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// ratio is a/b, or NaN when the floor's own figure is not positive (noise
// can make it so) and a ratio would mean nothing.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a / b
}

// summarise computes the medians over complete rounds.
func (r *report) summarise() {
	r.Summary = map[string]*summary{}
	var rounds []*round
	for _, rd := range r.Rounds {
		if len(rd.Targets) == len(r.targets) {
			rounds = append(rounds, rd)
		}
	}
	med := func(f func(rd *round) float64) float64 {
		var v []float64
		for _, rd := range rounds {
			v = append(v, f(rd))
		}
		return median(v)
	}
	r.Machine = medianMachine(rounds)
	r.RedisRSSKB = med(func(rd *round) float64 { return float64(rd.RedisRSSKB) })
	for _, name := range r.targets {
		s := &summary{P50us: map[string]float64{}, P99us: map[string]float64{}, P999us: map[string]float64{}, TTFBus: map[string]float64{},
			StreamTotalUs: map[string]float64{}, RunStates: map[string]int{}}
		proxy := name != "direct"
		gw := slices.Contains(r.gateways, name)
		if proxy {
			s.AddedP50us, s.AddedP99us = map[string]float64{}, map[string]float64{}
			s.AddedTTFBus, s.AddedTotalUs = map[string]float64{}, map[string]float64{}
		}
		if gw {
			s.OwnP50us, s.OwnP99us = map[string]float64{}, map[string]float64{}
			s.RatioP50, s.RatioP99, s.TTFBRatio = map[string]float64{}, map[string]float64{}, map[string]float64{}
			if r.nginx {
				s.TTFBNginx = map[string]float64{}
			}
		}
		ph := func(rd *round, t, p string) phaseResult { return rd.Targets[t].Phases[p] }
		for _, p := range r.phases {
			s.P50us[p] = med(func(rd *round) float64 { return ph(rd, name, p).P50us })
			s.P99us[p] = med(func(rd *round) float64 { return ph(rd, name, p).P99us })
			s.P999us[p] = med(func(rd *round) float64 { return ph(rd, name, p).P999us })
			if proxy {
				s.AddedP50us[p] = med(func(rd *round) float64 { return ph(rd, name, p).P50us - ph(rd, "direct", p).P50us })
				s.AddedP99us[p] = med(func(rd *round) float64 { return ph(rd, name, p).P99us - ph(rd, "direct", p).P99us })
			}
			if gw {
				s.OwnP50us[p] = med(func(rd *round) float64 { return ph(rd, name, p).OwnP50us })
				s.OwnP99us[p] = med(func(rd *round) float64 { return ph(rd, name, p).OwnP99us })
				s.RatioP50[p] = med(func(rd *round) float64 {
					return ratio(ph(rd, name, p).P50us-ph(rd, "direct", p).P50us, ph(rd, "floor", p).P50us-ph(rd, "direct", p).P50us)
				})
				s.RatioP99[p] = med(func(rd *round) float64 {
					return ratio(ph(rd, name, p).P99us-ph(rd, "direct", p).P99us, ph(rd, "floor", p).P99us-ph(rd, "direct", p).P99us)
				})
			}
		}
		st := func(rd *round, t, api string) streamResult { return rd.Targets[t].Streams[api] }
		for _, api := range r.apis {
			s.TTFBus[api] = med(func(rd *round) float64 { return st(rd, name, api).TTFBp50us })
			s.StreamTotalUs[api] = med(func(rd *round) float64 { return st(rd, name, api).TotalP50us })
			if proxy {
				s.AddedTTFBus[api] = med(func(rd *round) float64 { return st(rd, name, api).TTFBp50us - st(rd, "direct", api).TTFBp50us })
				s.AddedTotalUs[api] = med(func(rd *round) float64 { return st(rd, name, api).TotalP50us - st(rd, "direct", api).TotalP50us })
			}
			if gw {
				s.TTFBRatio[api] = med(func(rd *round) float64 {
					return ratio(st(rd, name, api).TTFBp50us-st(rd, "direct", api).TTFBp50us, st(rd, "floor", api).TTFBp50us-st(rd, "direct", api).TTFBp50us)
				})
			}
			if gw && r.nginx {
				s.TTFBNginx[api] = med(func(rd *round) float64 {
					return ratio(st(rd, name, api).TTFBp50us-st(rd, "direct", api).TTFBp50us, st(rd, "nginx", api).TTFBp50us-st(rd, "direct", api).TTFBp50us)
				})
			}
		}
		if proxy {
			r.phaseMemory(s, name, med)
		}
		s.SatRPS = med(func(rd *round) float64 { return rd.Targets[name].Saturation.PeakRPS })
		s.SatMockCPUus = med(func(rd *round) float64 { return rd.Targets[name].Saturation.MockCPUus })
		if proxy {
			s.SatCPUus = med(func(rd *round) float64 { return rd.Targets[name].Saturation.ProxyCPUus })
			s.CPU1000us = med(func(rd *round) float64 { return ph(rd, name, phase1000).ProxyCPUus })
			s.SatSwitches = med(func(rd *round) float64 { return rd.Targets[name].Saturation.ProxySwitches })
			s.Switches1000 = med(func(rd *round) float64 { return ph(rd, name, phase1000).ProxySwitches })
			s.PeakRSSKB = med(func(rd *round) float64 { return float64(rd.Targets[name].PeakRSSKB) })
			for k := range r.variants[name].replicas {
				if r.variants[name].replicas < 2 {
					break
				}
				s.ReplicaPeakRSSKB = append(s.ReplicaPeakRSSKB, med(func(rd *round) float64 {
					if rss := rd.Targets[name].ReplicaPeakRSSKB; k < len(rss) {
						return float64(rss[k])
					}
					return math.NaN()
				}))
			}
		}
		if r.variants[name].redisDB > 0 {
			s.Redis1000us = med(func(rd *round) float64 { return ph(rd, name, phase1000).RedisCPUus })
			s.SatRedisCPUus = med(func(rd *round) float64 { return rd.Targets[name].Saturation.RedisCPUus })
			s.RedisCmds1000 = medianCmds(rounds, func(rd *round) map[string]redisCmd { return ph(rd, name, phase1000).RedisCmds })
			s.SatRedisCmds = medianCmds(rounds, func(rd *round) map[string]redisCmd { return rd.Targets[name].Saturation.RedisCmds })
			if slices.Contains(r.gateways, "haltline") {
				s.OverEmbeddedP50us = med(func(rd *round) float64 { return ph(rd, name, phase1000).P50us - ph(rd, "haltline", phase1000).P50us })
			}
		}
		if gw {
			s.SatRatio = med(func(rd *round) float64 {
				return ratio(rd.Targets[name].Saturation.PeakRPS, rd.Targets["floor"].Saturation.PeakRPS)
			})
		}
		// Counts cover every round, complete or not.
		for _, rd := range r.Rounds {
			t := rd.Targets[name]
			if t == nil {
				continue
			}
			for _, p := range t.Phases {
				s.Requests += p.Requests
				s.Errors += p.Errors
				s.Unforwarded += p.Unforwarded
				for k, v := range p.RunStates {
					s.RunStates[k] += v
				}
				if p.Runs > 0 {
					s.Runs += p.Runs
					s.RunRequests += p.Requests - p.Errors
				}
			}
			for _, l := range t.Saturation.Levels {
				s.Unforwarded += l.Result.Unforwarded
			}
			if h := t.Saturation.Held; h != nil {
				s.Unforwarded += h.Result.Unforwarded
			}
			s.Requests += t.Saturation.Requests
			s.Errors += t.Saturation.Errors
			for _, st := range t.Streams {
				s.Requests += st.Requests
				s.Errors += st.Errors
			}
		}
		if len(s.RunStates) == 0 {
			s.RunStates = nil
		}
		r.Summary[name] = s
	}
	if len(rounds) == 0 {
		return
	}
	for _, g := range r.gateways {
		r.checks(g)
	}
}

// checks compares a gateway with the targets in force: a tail no longer
// than the floor's, throughput within a tenth of the floor's and CPU a
// request within a fifth more, on every workload (the median and the
// 200 KB figures are reported beside them, without a target).
func (r *report) checks(g string) {
	s, fl := r.Summary[g], r.Summary["floor"]
	add := func(phase, measure string, v float64, limit string, met bool, short string) {
		if !r.opts.runs(phase) {
			return // not measured in this run (-only)
		}
		c := check{Target: g, Measure: measure, Value: round2(v), Limit: limit, Met: met}
		if !met {
			c.Shortfall = short
		}
		r.Checks = append(r.Checks, c)
	}
	x := s.RatioP99[phase1000]
	add(phase1000, checkP99, x, "≤ 1.0× floor", x <= 1.0,
		fmt.Sprintf("%s the floor (%.0f µs vs %.0f µs added)", times(x), s.AddedP99us[phase1000], fl.AddedP99us[phase1000]))
	x = s.SatRatio
	add(phaseSat, checkSat, x, "≥ 0.9× floor", x >= 0.9,
		fmt.Sprintf("%s the floor (%.0f vs %.0f req/s)", times(x), s.SatRPS, fl.SatRPS))
	x = s.SatCPUus / fl.SatCPUus
	add(phaseSat, checkCPU, x, "≤ 1.2× floor", x <= 1.2,
		fmt.Sprintf("%s the floor (%.0f µs vs %.0f µs)", times(x), s.SatCPUus, fl.SatCPUus))
	if r.variants[g].redisDB > 0 && slices.Contains(r.gateways, "haltline") {
		x = s.OverEmbeddedP50us
		add(phase1000, checkOverEmbedded, x, "≤ 300 µs", x <= 300, fmt.Sprintf("%.0f µs over", x-300))
	}
	if ng := r.Summary["nginx"]; ng != nil {
		x = s.TTFBNginx[apiOpenAI]
		short := fmt.Sprintf("%s nginx (%.0f µs vs %.0f µs added)", times(x), s.AddedTTFBus[apiOpenAI], ng.AddedTTFBus[apiOpenAI])
		if math.IsNaN(x) {
			// nginx's own delay can vanish in the noise of a shared machine.
			short = fmt.Sprintf("nginx added nothing measurable (%.0f µs), the gateway %.0f µs", ng.AddedTTFBus[apiOpenAI], s.AddedTTFBus[apiOpenAI])
		}
		add("stream_"+apiOpenAI, checkTTFBNginx, x, "≤ 1.0× nginx", x <= 1.0, short)
		return
	}
	x = s.TTFBRatio[apiOpenAI]
	add("stream_"+apiOpenAI, checkTTFBFloor, x, "≤ 1.0× (nginx)", x <= 1.0,
		fmt.Sprintf("%s the floor (%.0f µs vs %.0f µs added)", times(x), s.AddedTTFBus[apiOpenAI], fl.AddedTTFBus[apiOpenAI]))
}

// The stream TTFB target is the "no more than nginx": measured
// against nginx when there is one, else against the floor under the measure
// name earlier results carry.
const (
	// checkOverEmbedded is the Redis targets' own: what sharing a run's
	// state through Redis adds to a call, against the same build on its
	// embedded store in the same round.
	checkOverEmbedded = "p50 over the embedded store's (haltline's) at 1,000 req/s, 2 KB"
	checkP99          = "added p99 at 1,000 req/s, 2 KB, vs floor"
	checkSat          = "saturation throughput vs floor"
	checkCPU          = "CPU per request at saturation (gateway process) vs floor"
	checkTTFBNginx    = "added stream TTFB vs nginx"
	checkTTFBFloor    = "added stream TTFB vs floor (no nginx here: the Go floor stands in)"
)

func round2(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	return math.Round(v*100) / 100
}

// failures lists what makes the run fail: errors, crashes, missing rounds.
// Speed never does.
func (r *report) failures() []string {
	var f []string
	if len(r.Rounds) < r.Meta.Rounds {
		f = append(f, fmt.Sprintf("%d of %d rounds completed", len(r.Rounds), r.Meta.Rounds))
	}
	for i, rd := range r.Rounds {
		for _, name := range r.targets {
			t := rd.Targets[name]
			if t == nil {
				f = append(f, fmt.Sprintf("round %d: %s not measured", i+1, name))
				continue
			}
			if t.LogTail != "" {
				f = append(f, fmt.Sprintf("round %d: %s log tail:\n%s", i+1, name, t.LogTail))
			}
			if t.Crashed != "" {
				f = append(f, fmt.Sprintf("round %d: %s %s", i+1, name, t.Crashed))
			}
			for p, ph := range t.Phases {
				if ph.Errors > 0 {
					f = append(f, fmt.Sprintf("round %d: %s %s: %d of %d requests failed: %s", i+1, name, p, ph.Errors, ph.Requests, strings.Join(ph.ErrorSample, " | ")))
				}
			}
			for api, st := range t.Streams {
				if st.Errors > 0 {
					f = append(f, fmt.Sprintf("round %d: %s stream %s: %d of %d failed: %s", i+1, name, api, st.Errors, st.Requests, strings.Join(st.ErrorSample, " | ")))
				}
			}
			if sat := t.Saturation; sat.Errors > 0 {
				f = append(f, fmt.Sprintf("round %d: %s saturation: %d of %d failed: %s", i+1, name, sat.Errors, sat.Requests, strings.Join(sat.ErrorSample, " | ")))
			}
		}
	}
	return f
}

func (r *report) writeJSON(path string, out io.Writer) error {
	b, err := json.MarshalIndent(nanSafe(r), "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = out.Write(b)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// nanSafe returns r with NaN figures (a ratio to a non-positive floor)
// replaced by -1, which JSON can carry.
func nanSafe(r *report) *report {
	c := *r
	c.Summary = map[string]*summary{}
	fix := func(m map[string]float64) map[string]float64 {
		if m == nil {
			return nil
		}
		o := map[string]float64{}
		for k, v := range m {
			o[k] = round2(v)
		}
		return o
	}
	for k, s := range r.Summary {
		t := *s
		t.P50us, t.P99us, t.AddedP50us, t.AddedP99us = fix(s.P50us), fix(s.P99us), fix(s.AddedP50us), fix(s.AddedP99us)
		t.RatioP50, t.RatioP99, t.TTFBus, t.AddedTTFBus = fix(s.RatioP50), fix(s.RatioP99), fix(s.TTFBus), fix(s.AddedTTFBus)
		t.TTFBRatio, t.StreamTotalUs, t.AddedTotalUs = fix(s.TTFBRatio), fix(s.StreamTotalUs), fix(s.AddedTotalUs)
		t.TTFBNginx, t.P999us = fix(s.TTFBNginx), fix(s.P999us)
		t.PhaseRSSKB, t.GCPauses, t.GCMaxPauseUs = fix(s.PhaseRSSKB), fix(s.GCPauses), fix(s.GCMaxPauseUs)
		t.CPU1000us, t.SatRPS, t.SatRatio, t.SatCPUus = round2(s.CPU1000us), round2(s.SatRPS), round2(s.SatRatio), round2(s.SatCPUus)
		t.SatMockCPUus, t.PeakRSSKB = round2(s.SatMockCPUus), round2(s.PeakRSSKB)
		t.Switches1000, t.SatSwitches = round2(s.Switches1000), round2(s.SatSwitches)
		t.Redis1000us, t.SatRedisCPUus, t.OverEmbeddedP50us = round2(s.Redis1000us), round2(s.SatRedisCPUus), round2(s.OverEmbeddedP50us)
		t.ReplicaPeakRSSKB = nil
		for _, v := range s.ReplicaPeakRSSKB {
			t.ReplicaPeakRSSKB = append(t.ReplicaPeakRSSKB, round2(v))
		}
		c.Summary[k] = &t
	}
	return &c
}

// markdown prints the results tables.
func (r *report) markdown(w io.Writer) {
	if len(r.Summary) == 0 {
		return
	}
	m := r.Meta
	fmt.Fprintf(w, "\n%s · %d × %s · %s · `%s` · medians of %d round(s) · %s\n\n",
		m.Date, m.NProc, m.CPUModel, m.GoVersion, m.Command, m.Rounds, m.Note)
	if r.Machine != nil {
		fmt.Fprintf(w, "Machine (median of the rounds): %s.\n\n", r.Machine)
	}
	fmt.Fprintf(w, "Placement: %s.\n\n", m.Placement)
	fmt.Fprintf(w, "Targets alternate within each phase: %d turns each, the order rotating; the saturation searches follow one another, the references' first, then the gateways', their order rotating from round to round.%s\n\n", m.Turns, holdNote(m.SatHold))
	fmt.Fprintf(w, "Streams: %d content chunks, measured one at a time; the mock pauses %s after a stream's first event, so that its first bytes reach the client before the mock, sharing the proxy's core, writes the rest.\n\n", m.Chunks, m.FirstGap)
	if r.nginx {
		fmt.Fprintf(w, "Reference nginx: %s, one process, upstream keep-alive, responses unbuffered; a reference, not checked against the issue's targets.\n\n", m.Nginx)
	} else {
		fmt.Fprintf(w, "nginx: %s; the stream TTFB target falls back to the floor.\n\n", m.Nginx)
	}
	r.redisNote(w)

	// Absolute latencies.
	fmt.Fprint(w, "| latency (µs) |")
	for _, t := range r.targets {
		fmt.Fprintf(w, " %s p50 | %s p99 | %s p99.9 |", t, t, t)
	}
	fmt.Fprint(w, " servers' CPU stolen, % (rounds) |\n|---|")
	for range r.targets {
		fmt.Fprint(w, "---:|---:|---:|")
	}
	fmt.Fprintln(w, "---:|")
	for _, p := range r.phases {
		if !r.opts.runs(p) {
			continue
		}
		fmt.Fprintf(w, "| %s |", phaseLabel(p))
		for _, t := range r.targets {
			fmt.Fprintf(w, " %s | %s | %s |", num(r.Summary[t].P50us[p]), num(r.Summary[t].P99us[p]), num(r.Summary[t].P999us[p]))
		}
		fmt.Fprintf(w, " %s |\n", r.stolen(p))
	}
	r.memoryTable(w)
	fmt.Fprint(w, "\nServers' CPU stolen by the hypervisor (%, rounds) during the streams:")
	for i, api := range r.apis {
		if i > 0 {
			fmt.Fprint(w, ",")
		}
		fmt.Fprintf(w, " %s (%s)", r.stolen("stream_"+api), api)
	}
	fmt.Fprintf(w, "; during the saturation searches: %s.\n", r.stolen(phaseSat))

	// What each proxy adds, with the gateways' ratio to the floor.
	fmt.Fprintln(w)
	fmt.Fprint(w, "| measure |")
	for _, t := range r.targets {
		fmt.Fprintf(w, " %s |", t)
	}
	fmt.Fprint(w, " issue target (haltline) | met |\n|---|")
	for range r.targets {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w, "---|---|")
	type row struct {
		label  string
		value  func(s *summary) float64
		ratio  func(s *summary) float64 // gateways only
		of     string                   // what ratio compares with, when not the floor
		direct bool                     // direct has a value
		own    bool                     // only gateways have a value
		redis  bool                     // only targets on Redis have a value
		unit   string
		target string
		check  string
		phase  string // the phase it reads, left out when -only skipped it
	}
	rows := []row{}
	for _, p := range r.phases {
		p := p
		rows = append(rows,
			row{label: "added p50, " + phaseLabel(p), value: func(s *summary) float64 { return s.AddedP50us[p] },
				ratio: func(s *summary) float64 { return s.RatioP50[p] }, unit: "µs", phase: p},
			row{label: "added p99, " + phaseLabel(p), value: func(s *summary) float64 { return s.AddedP99us[p] },
				ratio: func(s *summary) float64 { return s.RatioP99[p] }, unit: "µs", phase: p})
	}
	for i := range rows {
		if rows[i].label == "added p99, "+phaseLabel(phase1000) {
			rows[i].target, rows[i].check = "≤ floor", checkP99
		}
	}
	rows = append(rows,
		row{label: "gateway's own overhead p50 / p99 (its overhead header), " + phaseLabel(phase1000), own: true, phase: phase1000},
		row{label: "saturation throughput, closed loop (req/s)", value: func(s *summary) float64 { return s.SatRPS },
			ratio: func(s *summary) float64 { return s.SatRatio }, direct: true, target: "≥ 0.9× floor", check: checkSat, phase: phaseSat},
		row{label: "CPU per request at saturation, proxy process", value: func(s *summary) float64 { return s.SatCPUus },
			unit: "µs", target: "≤ 1.2× floor", check: checkCPU, phase: phaseSat},
		row{label: "CPU per request at 1,000 req/s, proxy process", value: func(s *summary) float64 { return s.CPU1000us }, unit: "µs", phase: phase1000},
		row{label: "CPU per request at saturation, redis-server", value: func(s *summary) float64 { return s.SatRedisCPUus }, redis: true, unit: "µs", phase: phaseSat},
		row{label: "CPU per request at 1,000 req/s, redis-server", value: func(s *summary) float64 { return s.Redis1000us }, redis: true, unit: "µs", phase: phase1000},
		row{label: "p50 over the embedded store's (haltline's), 1,000 req/s, 2 KB", value: func(s *summary) float64 { return s.OverEmbeddedP50us }, redis: true, unit: "µs",
			target: "≤ 300 µs (on Redis)", check: checkOverEmbedded, phase: phase1000},
		row{label: "context switches per request at saturation, proxy process", value: func(s *summary) float64 { return s.SatSwitches }, phase: phaseSat},
		row{label: "context switches per request at 1,000 req/s, proxy process", value: func(s *summary) float64 { return s.Switches1000 }, phase: phase1000},
		row{label: "CPU per request at saturation, mock process", value: func(s *summary) float64 { return s.SatMockCPUus }, direct: true, unit: "µs", phase: phaseSat},
	)
	for _, api := range r.apis {
		api, phase := api, "stream_"+api
		rows = append(rows,
			row{label: fmt.Sprintf("stream TTFB p50, %s, %d chunks", api, r.Meta.Chunks), value: func(s *summary) float64 { return s.TTFBus[api] }, direct: true, unit: "µs", phase: phase},
			row{label: fmt.Sprintf("added stream TTFB p50, %s", api), value: func(s *summary) float64 { return s.AddedTTFBus[api] },
				ratio: func(s *summary) float64 { return s.TTFBRatio[api] }, unit: "µs", phase: phase},
			row{label: fmt.Sprintf("stream total p50, %s, %d chunks", api, r.Meta.Chunks), value: func(s *summary) float64 { return s.StreamTotalUs[api] }, direct: true, unit: "µs", phase: phase},
			row{label: fmt.Sprintf("added stream total p50, %s", api), value: func(s *summary) float64 { return s.AddedTotalUs[api] }, unit: "µs", phase: phase},
		)
		if api == apiOpenAI {
			rows[len(rows)-3].target = "≤ nginx (not measured; floor shown)"
			rows[len(rows)-3].check = checkTTFBFloor
		}
		if r.nginx {
			rows[len(rows)-3].ratio = func(s *summary) float64 { return s.TTFBNginx[api] }
			rows[len(rows)-3].of = "nginx"
			if api == apiOpenAI {
				rows[len(rows)-3].target = "≤ nginx"
				rows[len(rows)-3].check = checkTTFBNginx
			}
		}
	}
	rows = append(rows,
		row{label: peakRSSRow, value: func(s *summary) float64 { return s.PeakRSSKB / 1024 }, target: "reported"},
		row{label: "requests / errors / not forwarded", target: "0 errors"},
	)
	for _, rw := range rows {
		if rw.phase != "" && !r.opts.runs(rw.phase) {
			continue
		}
		fmt.Fprintf(w, "| %s |", rw.label)
		for _, t := range r.targets {
			s := r.Summary[t]
			switch {
			case rw.own && slices.Contains(r.gateways, t):
				fmt.Fprintf(w, " %s / %s |", num(s.OwnP50us[phase1000]), num(s.OwnP99us[phase1000]))
			case rw.own:
				fmt.Fprint(w, " — |")
			case rw.value == nil:
				fmt.Fprintf(w, " %d / %d / %d |", s.Requests, s.Errors, s.Unforwarded)
			case t == "direct" && !rw.direct, rw.redis && r.variants[t].redisDB == 0:
				fmt.Fprint(w, " — |")
			case rw.label == peakRSSRow && len(s.ReplicaPeakRSSKB) > 1:
				var per []string
				for _, kb := range s.ReplicaPeakRSSKB {
					per = append(per, num(kb/1024))
				}
				fmt.Fprintf(w, " %s |", strings.Join(per, " / "))
			case rw.ratio != nil && slices.Contains(r.gateways, t) && rw.of != "":
				fmt.Fprintf(w, " %s (%s %s) |", num(rw.value(s)), times(rw.ratio(s)), rw.of)
			case rw.ratio != nil && slices.Contains(r.gateways, t):
				fmt.Fprintf(w, " %s (%s) |", num(rw.value(s)), times(rw.ratio(s)))
			default:
				fmt.Fprintf(w, " %s |", num(rw.value(s)))
			}
		}
		met := ""
		for _, c := range r.Checks {
			if c.Target == "haltline" && c.Measure == rw.check {
				met = verdict(c)
			}
		}
		if rw.redis && rw.check != "" {
			var per []string
			for _, c := range r.Checks {
				if c.Measure == rw.check {
					per = append(per, c.Target+": "+verdict(c))
				}
			}
			met = strings.Join(per, "; ")
		}
		if rw.value == nil && !rw.own {
			met = "yes"
			if r.Summary["haltline"].Errors > 0 {
				met = "**no**"
			}
		}
		fmt.Fprintf(w, " %s | %s |\n", rw.target, met)
	}
	fmt.Fprintln(w)
	r.redisCommands(w)
	if s := r.Summary["haltline"]; s != nil && len(s.RunStates) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.RunStates)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.RunStates[k]))
		}
		fmt.Fprintf(w, "Haltline's X-Run-State on the fixed-rate answers: %s.\n", strings.Join(parts, ", "))
	}
	if s := r.Summary["haltline"]; s != nil && s.Runs > 0 {
		ids := "sent as X-Run-Id"
		if r.Meta.Lineage {
			ids = "found by lineage (-lineage: no X-Run-Id sent)"
		}
		fmt.Fprintf(w, "Haltline's fixed-rate answers named %d runs for %d requests: %.2f steps a run (the workload's runs have %d; the runs cut short at each phase's end count too), %s.\n",
			s.Runs, s.RunRequests, float64(s.RunRequests)/float64(s.Runs), r.Meta.Steps, ids)
	}
}

// medianCmds is each command's median cost over the rounds (a round in
// which it did not run left out), nil when no round measured one.
func medianCmds(rounds []*round, of func(rd *round) map[string]redisCmd) map[string]redisCmd {
	names := map[string]bool{}
	for _, rd := range rounds {
		for n := range of(rd) {
			names[n] = true
		}
	}
	if len(names) == 0 {
		return nil
	}
	out := map[string]redisCmd{}
	for n := range names {
		var calls, us []float64
		for _, rd := range rounds {
			if c, ok := of(rd)[n]; ok {
				calls, us = append(calls, c.Calls), append(us, c.Us)
			}
		}
		out[n] = redisCmd{Calls: round2(median(calls)), Us: round2(median(us))}
	}
	return out
}

// redisCommands writes, for each target on Redis, what redis-server spent
// per request and on which commands.
func (r *report) redisCommands(w io.Writer) {
	for _, g := range r.gateways {
		s := r.Summary[g]
		if r.variants[g].redisDB == 0 || s == nil {
			continue
		}
		for _, x := range []struct {
			phase, label string
			cmds         map[string]redisCmd
		}{{phase1000, phaseLabel(phase1000), s.RedisCmds1000}, {phaseSat, "saturation", s.SatRedisCmds}} {
			if r.opts.runs(x.phase) && len(x.cmds) > 0 {
				fmt.Fprintf(w, "redis-server for %s, %s: %s.\n", g, x.label, redisCmdNote(x.cmds, 5))
			}
		}
	}
}

// peakRSSRow is the label of the peak RSS row, whose cell for a target
// of several processes lists each one's.
const peakRSSRow = "peak RSS (VmHWM), MiB"

// verdict is a check's cell in the met column.
func verdict(c check) string {
	if c.Met {
		return "yes"
	}
	return "**no**: " + c.Shortfall
}

// redisNote says what the Redis targets are, when there are some.
func (r *report) redisNote(w io.Writer) {
	var parts []string
	for _, g := range r.gateways {
		v := r.variants[g]
		if v.redisDB == 0 {
			continue
		}
		if v.replicas > 1 {
			parts = append(parts, fmt.Sprintf("%s, %d gateway processes on the same Redis, %s", g, v.replicas, v.spread))
		} else {
			parts = append(parts, g+", one gateway process on it")
		}
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "Targets on Redis (%s; one redis-server a round, on the servers' CPU, nothing persisted, each target in a database of its own; peak RSS %s MiB): %s. "+
		"Every server shares one CPU here, so the two-process figures measure the cost of sharing a run's state through Redis, not the gain of a second machine. "+
		"For a target of two processes, its proxy CPU and context switches are both processes' summed, its peak RSS each process's (the highest in the per-phase table); "+
		"redis-server's CPU is counted over the target's turns only, in rows of its own.\n\n",
		r.Meta.Redis, num(r.RedisRSSKB/1024), strings.Join(parts, "; "))
}

func phaseLabel(p string) string {
	switch p {
	case phase200:
		return "200 req/s, 2 KB"
	case phase1000:
		return "1,000 req/s, 2 KB"
	case phase200KB:
		return "1,000 req/s, 200 KB"
	case phaseLog:
		return "1,000 req/s, 64 KB tool results of JSON log lines"
	case phaseAnth:
		return "1,000 req/s, 2 KB, Anthropic"
	}
	return p
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func times(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v)
}

// stolen lists, round by round, the share of the servers' CPU the
// hypervisor took during a phase ("—" where it was not measured).
func (r *report) stolen(phase string) string {
	var parts []string
	for _, rd := range r.Rounds {
		if m := rd.PhaseMachine[phase]; m != nil {
			parts = append(parts, strconv.FormatFloat(m.ServerStealPct, 'f', 1, 64))
		} else {
			parts = append(parts, "—")
		}
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, " / ")
}

// holdNote says what the saturation figures are read over.
func holdNote(hold string) string {
	if d, err := time.ParseDuration(hold); err != nil || d <= 0 {
		return " The saturation figures are each search's best level."
	}
	return " The saturation figures are read over each search's best concurrency held " + hold + " after it."
}

// memoryPhases are the phases the memory table has rows for, in order.
func (r *report) memoryPhases() []string {
	var out []string
	for _, p := range r.phases {
		out = append(out, p)
	}
	for _, api := range r.apis {
		out = append(out, "stream_"+api)
	}
	out = append(out, phaseSat)
	var ran []string
	for _, p := range out {
		if r.opts.runs(p) {
			ran = append(ran, p)
		}
	}
	return ran
}

// phaseMemory fills a proxy's peak RSS and GC pauses by phase: medians
// over the rounds.
func (r *report) phaseMemory(s *summary, name string, med func(func(rd *round) float64) float64) {
	s.PhaseRSSKB, s.GCPauses, s.GCMaxPauseUs = map[string]float64{}, map[string]float64{}, map[string]float64{}
	of := func(rd *round, p string) (int64, *gcPauses) {
		t := rd.Targets[name]
		switch {
		case p == phaseSat:
			return t.Saturation.PeakRSSKB, t.Saturation.GCPauses
		case strings.HasPrefix(p, "stream_"):
			st := t.Streams[strings.TrimPrefix(p, "stream_")]
			return st.PeakRSSKB, st.GCPauses
		}
		ph := t.Phases[p]
		return ph.PeakRSSKB, ph.GCPauses
	}
	for _, p := range r.memoryPhases() {
		s.PhaseRSSKB[p] = med(func(rd *round) float64 { kb, _ := of(rd, p); return float64(kb) })
		if !slices.Contains(r.gateways, name) {
			continue
		}
		s.GCPauses[p] = med(func(rd *round) float64 {
			if _, gc := of(rd, p); gc != nil {
				return float64(gc.Count)
			}
			return math.NaN()
		})
		s.GCMaxPauseUs[p] = med(func(rd *round) float64 {
			if _, gc := of(rd, p); gc != nil {
				return gc.longest()
			}
			return math.NaN()
		})
	}
}

// memoryTable writes the proxies' peak RSS by phase and the gateways' GC
// pauses: how many, and the bound of the longest.
func (r *report) memoryTable(w io.Writer) {
	phases := r.memoryPhases()
	if len(phases) == 0 {
		return
	}
	fmt.Fprint(w, "\n| peak RSS (MiB) · GC pauses · longest pause ≤ (µs) |")
	var cols []string
	for _, t := range r.targets {
		if t != "direct" {
			cols = append(cols, t)
			fmt.Fprintf(w, " %s |", t)
		}
	}
	fmt.Fprint(w, "\n|---|")
	for range cols {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, p := range phases {
		fmt.Fprintf(w, "| %s |", phaseLabel(p))
		for _, t := range cols {
			s := r.Summary[t]
			fmt.Fprintf(w, " %s", num(s.PhaseRSSKB[p]/1024))
			if slices.Contains(r.gateways, t) {
				fmt.Fprintf(w, " · %s · %s", num(s.GCPauses[p]), num(s.GCMaxPauseUs[p]))
			}
			fmt.Fprint(w, " |")
		}
		fmt.Fprintln(w)
	}
}
