package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/wire"
)

// Metrics are the gateway's Prometheus metrics.
type Metrics struct {
	Calls          *prometheus.CounterVec
	CallDuration   *prometheus.HistogramVec
	Overhead       *prometheus.HistogramVec
	Tokens         *prometheus.CounterVec
	Cost           *prometheus.CounterVec
	RunsStarted    prometheus.Counter
	RunsEnded      *prometheus.CounterVec
	RunsActive     prometheus.Gauge
	Terminations   *prometheus.CounterVec
	Reservations   *prometheus.CounterVec
	LoopDetections *prometheus.CounterVec
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
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_tokens_total", Help: "Tokens metered from the providers' usage, by type (input includes cached and cache writes).",
		}, []string{"provider", "model", "type"}),
		Cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_cost_usd_total", Help: "Actual cost in USD from usage × catalog prices.",
		}, []string{"provider", "model"}),
		RunsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "haltline_runs_started_total", Help: "Runs started.",
		}),
		RunsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_runs_ended_total", Help: "Runs ended, by final state and reason.",
		}, []string{"state", "reason"}),
		RunsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "haltline_runs_active", Help: "Runs started and not ended.",
		}),
		Terminations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_terminations_total", Help: "Termination lines that fired, by reason and mode (enforce or shadow).",
		}, []string{"reason", "mode"}),
		Reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_reservations_total", Help: "Budget reservations by result (ok, wrap_up, refused).",
		}, []string{"result"}),
		LoopDetections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "haltline_loop_detections_total", Help: "Loop and stall detector hits, by detector and mode.",
		}, []string{"detector", "mode"}),
	}
	reg.MustRegister(m.Calls, m.CallDuration, m.Overhead, m.Tokens, m.Cost, m.RunsStarted,
		m.RunsEnded, m.RunsActive, m.Terminations, m.Reservations, m.LoopDetections)
	return m
}

// ModelCall implements pipeline.Observer.
func (m *Metrics) ModelCall(api string, status int, total, upstream time.Duration) {
	m.Calls.WithLabelValues(api, strconv.Itoa(status)).Inc()
	m.CallDuration.WithLabelValues(api).Observe(total.Seconds())
	m.Overhead.WithLabelValues(api).Observe(max(total-upstream, 0).Seconds())
}

// Usage implements pipeline.Observer.
func (m *Metrics) Usage(provider, model string, u wire.Usage, cost accounting.Money) {
	m.Tokens.WithLabelValues(provider, model, "input").Add(float64(u.InputTokens))
	m.Tokens.WithLabelValues(provider, model, "output").Add(float64(u.OutputTokens))
	m.Tokens.WithLabelValues(provider, model, "reasoning").Add(float64(u.ReasoningTokens))
	m.Tokens.WithLabelValues(provider, model, "cached").Add(float64(u.CachedTokens))
	m.Tokens.WithLabelValues(provider, model, "cache_write").Add(float64(u.CacheWriteTokens))
	m.Cost.WithLabelValues(provider, model).Add(cost.USD())
}

// RunStarted implements pipeline.Observer.
func (m *Metrics) RunStarted() { m.RunsStarted.Inc(); m.RunsActive.Inc() }

// RunEnded implements pipeline.Observer.
func (m *Metrics) RunEnded(state, reason string) {
	m.RunsEnded.WithLabelValues(state, reason).Inc()
	m.RunsActive.Dec()
}

// Termination implements pipeline.Observer.
func (m *Metrics) Termination(reason, mode string) {
	m.Terminations.WithLabelValues(reason, mode).Inc()
}

// Reservation implements pipeline.Observer.
func (m *Metrics) Reservation(result string) { m.Reservations.WithLabelValues(result).Inc() }

// LoopDetection implements pipeline.Observer.
func (m *Metrics) LoopDetection(detector, mode string) {
	m.LoopDetections.WithLabelValues(detector, mode).Inc()
}
