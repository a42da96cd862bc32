package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Observer is the pipeline's observer: metrics always, traces when a Tracer
// is set, and the per-call and per-termination log lines.
type Observer struct {
	m   *Metrics
	t   *Tracer // nil: tracing off
	log *slog.Logger
}

var _ pipeline.Observer = (*Observer)(nil)

// NewObserver combines the three signals. tr may be nil (tracing off), log
// may be nil (no log lines).
func NewObserver(m *Metrics, tr *Tracer, log *slog.Logger) *Observer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Observer{m: m, t: tr, log: log}
}

// ModelCall implements pipeline.Observer: metrics, the call's span, and one
// log line with the fixed keys. Nothing of the request's content is logged.
func (o *Observer) ModelCall(c pipeline.CallReport) {
	o.m.ModelCall(c.API, c.Status, c.Total, c.Upstream, c.FirstByte)
	o.m.TeamSpend(c.Team, c.Cost)
	o.t.CallDone(c)
	if !o.log.Enabled(context.Background(), slog.LevelInfo) {
		return // the attributes are not built for nothing
	}
	attrs := []slog.Attr{
		slog.String(KeyRunID, runstate.NameOf(c.RunID)), slog.String(KeySessionID, c.SessionID),
		slog.String(KeyTenant, c.Tenant), slog.String(KeyTeam, c.Team),
		slog.String(KeyAPI, c.API), slog.String(KeyModel, c.Model), slog.Int(KeyStatus, c.Status),
		slog.Int64(KeyStep, c.Step), slog.Int64(KeyInputTokens, c.Usage.InputTokens),
		slog.Int64(KeyOutputTokens, c.Usage.OutputTokens), slog.Float64(KeyCostUSD, c.Cost.USD()),
		slog.Float64(KeyDurationMs, ms(c.Total)), slog.Float64(KeyOverheadMs, ms(max(c.Total-c.Upstream, 0))),
		slog.Float64(KeyUpstreamMs, ms(c.Upstream)), slog.Float64(KeyFirstByteMs, ms(c.FirstByte)),
		slog.String(KeyFinishReason, c.FinishReason), slog.Int(KeyToolCalls, c.ToolCalls),
		slog.Bool(KeyWrapUp, c.WrapUp),
	}
	if c.Err != nil {
		attrs = append(attrs, slog.String(KeyError, c.Err.Error()))
	}
	o.log.LogAttrs(context.Background(), slog.LevelInfo, MsgModelCall, attrs...)
}

// ms is a duration in milliseconds with microsecond precision: overheads
// are well under a millisecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Usage implements pipeline.Observer.
func (o *Observer) Usage(provider, model string, u wire.Usage, cost accounting.Money) {
	o.m.Usage(provider, model, u, cost)
}

// RunStarted implements pipeline.Observer.
func (o *Observer) RunStarted() { o.m.RunStarted() }

// RunEnded implements pipeline.Observer: metrics, the run span's status and
// event, and the termination's log line.
func (o *Observer) RunEnded(e pipeline.RunEnd) {
	o.m.RunEnded(e.State, e.Reason)
	traceID := o.t.TraceID(e.RunID)
	o.t.RunEnded(e)
	attrs := []slog.Attr{
		slog.String(KeyRunID, runstate.NameOf(e.RunID)), slog.String(KeySessionID, e.SessionID),
		slog.String(KeyTenant, e.Tenant), slog.String(KeyTeam, e.Team),
		slog.String(KeyStatus, e.State), slog.String(KeyReason, e.Reason), slog.Int64(KeyStep, e.Step),
		slog.String(KeyDetector, e.Detector), slog.String(KeyMode, e.Mode), slog.String(KeyDetail, e.Detail),
		slog.String(KeyTool, e.LastTool), slog.String(KeyArgsHash, e.ArgumentsHash),
	}
	if traceID != "" {
		attrs = append(attrs, slog.String(KeyTraceID, traceID))
	}
	o.log.LogAttrs(context.Background(), slog.LevelInfo, MsgRunEnded, attrs...)
}

// Termination implements pipeline.Observer.
func (o *Observer) Termination(reason, mode string) { o.m.Termination(reason, mode) }

// Reservation implements pipeline.Observer.
func (o *Observer) Reservation(result string) { o.m.Reservation(result) }

// LoopDetection implements pipeline.Observer.
func (o *Observer) LoopDetection(detector, mode string) { o.m.LoopDetection(detector, mode) }

// Transition implements pipeline.Observer.
func (o *Observer) Transition(runID, from, to string, at time.Time) {
	o.t.Transition(runID, from, to, at)
}

// UpstreamStart implements pipeline.Observer. A nil interface (not a nil
// span) when tracing is off, so the report's Trace stays nil.
func (o *Observer) UpstreamStart(runID, api, provider, model string, set func(key, value string)) any {
	if o.t == nil {
		return nil
	}
	return o.t.UpstreamStart(runID, api, provider, model, set)
}

// Compression implements pipeline.Observer.
func (o *Observer) Compression(api string, before, after int64) { o.m.Compression(api, before, after) }

// ToolOutputCut counts what a forwarded request left out of long tool
// output.
func (o *Observer) ToolOutputCut(tenant string, chars, tokens int64) {
	o.m.ToolOutputCut(tenant, chars, tokens)
}

// PolicyDecision is policy.Options.DecisionLog: the decision's metrics and
// a debug line (arguments only as their fingerprint).
func (o *Observer) PolicyDecision(d policy.Decision) {
	o.m.PolicyDecision(d.Package, d.Verdict, d.Err != nil, d.Duration)
	if d.Err != nil {
		o.log.Error(MsgPolicyFailed, KeyPackage, d.Package, KeyRunID, d.RunID, KeyError, d.Err)
		return
	}
	if !o.log.Enabled(context.Background(), slog.LevelDebug) {
		return // off by default; the arguments would be boxed for nothing, several times a call
	}
	o.log.Debug(MsgPolicyDecision, KeyPackage, d.Package, KeyRunID, d.RunID, KeySubject, d.Subject,
		KeyArgsHash, d.Fingerprint, KeyDecision, d.Summary, KeyDurationUs, d.Duration.Microseconds(),
		KeyPolicyVer, d.Version)
}

// Shutdown flushes the traces.
func (o *Observer) Shutdown(ctx context.Context) error { return o.t.Shutdown(ctx) }
