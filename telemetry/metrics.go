package telemetry

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Metrics are the gateway's Prometheus metrics. The README's "Metrics"
// table lists them with their labels; keep the two in step.
type Metrics struct {
	Calls          *prometheus.CounterVec
	CallDuration   *prometheus.HistogramVec
	Overhead       *prometheus.HistogramVec
	FirstByte      *prometheus.HistogramVec
	Tokens         *prometheus.CounterVec
	Cost           *prometheus.CounterVec
	TeamCost       *prometheus.CounterVec
	RunsStarted    prometheus.Counter
	RunsEnded      *prometheus.CounterVec
	RunsActive     prometheus.Gauge
	Terminations   *prometheus.CounterVec
	Reservations   *prometheus.CounterVec
	LoopDetections *prometheus.CounterVec
	Decisions      *prometheus.CounterVec
	DecisionTime   *prometheus.HistogramVec
	Compressions   *prometheus.CounterVec
	TokensRemoved  *prometheus.CounterVec
	CompressRatio  *prometheus.HistogramVec
	// Long tool output left out of forwarded requests, by tenant.
	CutChars, CutTokens *prometheus.CounterVec

	// The series every call writes, looked up once per label values: a
	// call's usage costs one map read instead of six label lookups.
	calls     seriesCache[callKey, *callSeries]
	firstByte seriesCache[string, prometheus.Observer] // only once observed: an empty series would show
	usage     seriesCache[usageKey, *usageSeries]
	decisions seriesCache[[2]string, *decisionSeries] // package, result
	teams     seriesCache[string, prometheus.Counter] // the credentials' teams
}

type decisionSeries struct {
	count prometheus.Counter
	time  prometheus.Observer
}

type callKey struct {
	api    string
	status int
}

type callSeries struct {
	calls              prometheus.Counter
	duration, overhead prometheus.Observer
}

type usageKey struct{ provider, model string }

type usageSeries struct {
	input, output, reasoning, cached, cacheWrite, cost prometheus.Counter
}

// seriesCache maps label values (a bounded set: APIs, statuses, priced
// models or "other", policy packages, configured teams) to their series. Reads take no lock: the map is
// copied when a key is added.
type seriesCache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

func (c *seriesCache[K, V]) get(k K, build func() V) V {
	if p := c.m.Load(); p != nil {
		if v, ok := (*p)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if v, ok := old[k]; ok {
		return v
	}
	v := build()
	next := make(map[K]V, len(old)+1)
	maps.Copy(next, old)
	next[k] = v
	c.m.Store(&next)
	return v
}

// New registers the metrics on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_model_calls_total", Help: "Model calls by API and HTTP status answered to the agent.",
		}, []string{"api", "status"}),
		CallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "haltline_model_call_duration_seconds", Help: "Time from request to the end of the answer.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"api"}),
		Overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "haltline_gateway_overhead_seconds", Help: "Time spent inside the gateway per call: total minus the upstream wait.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 16),
		}, []string{"api"}),
		FirstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "haltline_upstream_first_byte_seconds", Help: "Time from forwarding a call to the upstream's first response byte.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"api"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_tokens_total", Help: "Tokens metered from the providers' usage, by type (input includes cached and cache writes).",
		}, []string{"provider", "model", "type"}),
		Cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_cost_usd_total", Help: "Actual cost in USD from usage × catalog prices.",
		}, []string{"provider", "model"}),
		TeamCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_team_cost_usd_total", Help: "Actual cost in USD by the team the credential names (\"none\" without one).",
		}, []string{"team"}),
		RunsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "haltline_runs_started_total", Help: "Runs started.",
		}),
		RunsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_runs_ended_total", Help: "Runs ended, by final state and reason.",
		}, []string{"state", "reason"}),
		RunsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "haltline_runs_active", Help: "Runs started and not ended by this process.",
		}),
		Terminations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_terminations_total", Help: "Termination lines that fired, by reason and mode (enforce or shadow).",
		}, []string{"reason", "mode"}),
		Reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_reservations_total", Help: "Budget reservations by result (ok, output_capped, wrap_up, refused).",
		}, []string{"result"}),
		LoopDetections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_loop_detections_total", Help: "Loop and stall detector hits, by detector and mode.",
		}, []string{"detector", "mode"}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_policy_decisions_total", Help: "Rego policy decisions, by package and result (allow, deny, answer, error).",
		}, []string{"package", "result"}),
		DecisionTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "haltline_policy_evaluation_seconds", Help: "Time to evaluate one policy decision.",
			Buckets: prometheus.ExponentialBuckets(0.000005, 2.5, 12),
		}, []string{"package"}),
		Compressions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_context_compressions_total", Help: "Forwarded contexts the context manager compressed.",
		}, []string{"api"}),
		TokensRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_context_tokens_removed_total", Help: "Estimated tokens removed from forwarded contexts by compression.",
		}, []string{"api"}),
		CompressRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "haltline_context_compression_ratio", Help: "Estimated tokens after compression divided by before.",
			Buckets: prometheus.LinearBuckets(0.1, 0.1, 10),
		}, []string{"api"}),
		CutChars: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_tool_output_cut_characters_total", Help: "Characters of long tool output left out of forwarded requests.",
		}, []string{"tenant"}),
		CutTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_tool_output_cut_tokens_total", Help: "Estimated input tokens of long tool output left out of forwarded requests.",
		}, []string{"tenant"}),
	}
	reg.MustRegister(m.Calls, m.CallDuration, m.Overhead, m.FirstByte, m.Tokens, m.Cost, m.TeamCost, m.RunsStarted,
		m.RunsEnded, m.RunsActive, m.Terminations, m.Reservations, m.LoopDetections, m.Decisions,
		m.DecisionTime, m.Compressions, m.TokensRemoved, m.CompressRatio, m.CutChars, m.CutTokens)
	return m
}

// ModelCall counts one call: status, duration, the gateway's own overhead
// and, when it was forwarded, the upstream's time to first byte.
func (m *Metrics) ModelCall(api string, status int, total, upstream, firstByte time.Duration) {
	s := m.calls.get(callKey{api, status}, func() *callSeries {
		return &callSeries{calls: m.Calls.WithLabelValues(api, statusLabel(status)), duration: m.CallDuration.WithLabelValues(api),
			overhead: m.Overhead.WithLabelValues(api)}
	})
	s.calls.Inc()
	s.duration.Observe(total.Seconds())
	s.overhead.Observe(max(total-upstream, 0).Seconds())
	if firstByte > 0 {
		m.firstByte.get(api, func() prometheus.Observer { return m.FirstByte.WithLabelValues(api) }).Observe(firstByte.Seconds())
	}
}

// statusLabel is strconv.Itoa without an allocation for the usual codes.
func statusLabel(status int) string {
	switch status {
	case 200:
		return "200"
	case 400:
		return "400"
	case 429:
		return "429"
	case 500:
		return "500"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	return strconv.Itoa(status)
}

// TeamSpend adds a call's cost to its team. Teams come from configured
// virtual keys, so the label stays bounded.
func (m *Metrics) TeamSpend(team string, cost accounting.Money) {
	if cost <= 0 {
		return
	}
	if team == "" {
		team = "none"
	}
	m.teams.get(team, func() prometheus.Counter { return m.TeamCost.WithLabelValues(team) }).Add(cost.USD())
}

// Usage counts metered tokens by type, and the cost.
func (m *Metrics) Usage(provider, model string, u wire.Usage, cost accounting.Money) {
	s := m.usageSeries(provider, model)
	s.input.Add(float64(u.InputTokens))
	s.output.Add(float64(u.OutputTokens))
	s.reasoning.Add(float64(u.ReasoningTokens))
	s.cached.Add(float64(u.CachedTokens))
	s.cacheWrite.Add(float64(u.CacheWriteTokens))
	s.cost.Add(cost.USD())
}

func (m *Metrics) usageSeries(provider, model string) *usageSeries {
	return m.usage.get(usageKey{provider, model}, func() *usageSeries {
		tokens := func(typ string) prometheus.Counter { return m.Tokens.WithLabelValues(provider, model, typ) }
		return &usageSeries{input: tokens("input"), output: tokens("output"), reasoning: tokens("reasoning"),
			cached: tokens("cached"), cacheWrite: tokens("cache_write"), cost: m.Cost.WithLabelValues(provider, model)}
	})
}

// RunStarted counts a new run.
func (m *Metrics) RunStarted() { m.RunsStarted.Inc(); m.RunsActive.Inc() }

// RunEnded counts a run's end.
func (m *Metrics) RunEnded(state, reason string) {
	m.RunsEnded.WithLabelValues(state, reason).Inc()
	m.RunsActive.Dec()
}

// Termination counts a termination line that fired.
func (m *Metrics) Termination(reason, mode string) {
	m.Terminations.WithLabelValues(reason, mode).Inc()
}

// Reservation counts a reservation's result.
func (m *Metrics) Reservation(result string) { m.Reservations.WithLabelValues(result).Inc() }

// LoopDetection counts a detector hit.
func (m *Metrics) LoopDetection(detector, mode string) {
	m.LoopDetections.WithLabelValues(detector, mode).Inc()
}

// PolicyDecision counts a decision and observes its evaluation time. Only
// the verdict ("allow", "deny", "" for an answer) becomes a label, never
// a deny message, so series do not multiply.
func (m *Metrics) PolicyDecision(pkg, verdict string, failed bool, d time.Duration) {
	k := [2]string{pkg, decisionResult(verdict, failed)}
	s := m.decisions.get(k, func() *decisionSeries {
		return &decisionSeries{count: m.Decisions.WithLabelValues(k[0], k[1]), time: m.DecisionTime.WithLabelValues(pkg)}
	})
	s.count.Inc()
	s.time.Observe(d.Seconds())
}

func decisionResult(verdict string, failed bool) string {
	switch {
	case failed:
		return "error"
	case verdict == "":
		return "answer" // budgets, thresholds, termination modes: answers, not verdicts
	}
	return verdict
}

// Compression counts a context rewrite; before and after are estimated
// tokens.
func (m *Metrics) Compression(api string, before, after int64) {
	m.Compressions.WithLabelValues(api).Inc()
	if before > after {
		m.TokensRemoved.WithLabelValues(api).Add(float64(before - after))
	}
	if before > 0 {
		m.CompressRatio.WithLabelValues(api).Observe(float64(after) / float64(before))
	}
}

// ToolOutputCut counts what a forwarded request left out of long tool
// output.
func (m *Metrics) ToolOutputCut(tenant string, chars, tokens int64) {
	m.CutChars.WithLabelValues(tenant).Add(float64(chars))
	if tokens > 0 {
		m.CutTokens.WithLabelValues(tenant).Add(float64(tokens))
	}
}

// runStates are exported by the runs collector even at zero, so that a
// dashboard's series exist before the first run.
var runStates = []runstate.State{runstate.Ready, runstate.Deciding, runstate.ExecutingTools, runstate.Paused,
	runstate.Completed, runstate.CompletedWithDegradation, runstate.Terminated, runstate.Failed, runstate.Cancelled}

// runsCollector reads the registry's counts at scrape time: always right,
// even after a restart restored runs, and nothing to keep in step.
type runsCollector struct {
	desc  *prometheus.Desc
	count func() map[runstate.State]int
}

// RegisterRunStates exports haltline_runs{state}: the runs the registry
// holds, by state, counted at scrape time from count (Registry.Count).
func RegisterRunStates(reg prometheus.Registerer, count func() map[runstate.State]int) error {
	return reg.Register(&runsCollector{
		desc: prometheus.NewDesc("haltline_runs", "Runs held by the gateway, by state, counted at scrape time.",
			[]string{"state"}, nil),
		count: count,
	})
}

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.count()
	for _, s := range runStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

// RegisterStoreReadCache exports haltline_store_read_cache_reads_total
// {result}: the reads of the store's cached buckets served from its read
// cache (hit) and from the store (miss), read at scrape time.
func RegisterStoreReadCache(reg prometheus.Registerer, hits, misses func() uint64) error {
	desc := prometheus.NewDesc("haltline_store_read_cache_reads_total",
		"Reads of the embedded store's cached records (run snapshots, lineage keys, stored tool outputs), by result (hit, miss).",
		[]string{"result"}, nil)
	return reg.Register(&countersCollector{desc: desc, counts: map[string]func() uint64{"hit": hits, "miss": misses}})
}

// countersCollector exports counters that another package keeps, one
// series a label value.
type countersCollector struct {
	desc   *prometheus.Desc
	counts map[string]func() uint64
}

func (c *countersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *countersCollector) Collect(ch chan<- prometheus.Metric) {
	for label, n := range c.counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n()), label)
	}
}
