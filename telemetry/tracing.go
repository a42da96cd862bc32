package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/runstate"
)

// SpanExporter is where finished spans go. It is the OTel SDK's type, named
// here so that callers (app, tests) need not import OTel themselves.
type SpanExporter = sdktrace.SpanExporter

// TraceOptions turn tracing on: an OTLP/HTTP endpoint, or an exporter
// (tests pass an in-memory one). With neither, tracing is off.
type TraceOptions struct {
	// Endpoint is an OTLP/HTTP URL. A bare base URL (no path), as in
	// OTEL_EXPORTER_OTLP_ENDPOINT, gets the signal path /v1/traces.
	Endpoint string
	// Exporter, when set, takes precedence over Endpoint; spans are
	// exported synchronously, so tests see them as soon as they end.
	Exporter SpanExporter
	// MaxRuns bounds the runs whose spans are open at once; beyond it the
	// oldest run's spans are ended. Default 10000.
	MaxRuns int
}

// Attribute keys of the GenAI semantic conventions and of Haltline's own.
const (
	attrGenAISystem        = "gen_ai.system"
	attrGenAIProvider      = "gen_ai.provider.name"
	attrGenAIOperation     = "gen_ai.operation.name"
	attrGenAIRequestModel  = "gen_ai.request.model"
	attrGenAIInputTokens   = "gen_ai.usage.input_tokens"
	attrGenAIOutputTokens  = "gen_ai.usage.output_tokens"
	attrGenAIFinishReasons = "gen_ai.response.finish_reasons"
	attrHTTPStatus         = "http.response.status_code"
	attrRunID              = "haltline.run.id"
	attrSessionID          = "haltline.session.id"
	attrTenant             = "haltline.tenant"
	attrTeam               = "haltline.team"
	attrAPI                = "haltline.api"
	attrStep               = "haltline.step"
	attrCostUSD            = "haltline.cost_usd"
	attrReasoningTokens    = "haltline.usage.reasoning_tokens"
	attrCachedTokens       = "haltline.usage.cached_tokens"
	attrWrapUp             = "haltline.wrap_up"
	attrFirstByteMs        = "haltline.upstream.first_byte_ms"
	attrState              = "haltline.run.state"
	attrReason             = "haltline.termination.reason"
	attrDetail             = "haltline.termination.detail"
	attrDetector           = "haltline.termination.detector"
	attrMode               = "haltline.termination.mode"
	attrLastTool           = "haltline.last_action.tool"
	attrArgsHash           = "haltline.last_action.arguments_hash"
	attrResumed            = "haltline.run.resumed_from"
)

// Span and event names.
const (
	SpanRun        = "run"
	EventRunEnded  = "run.ended"
	tracerName     = "github.com/haltline/haltline/telemetry"
	defaultMaxRuns = 10000
)

// tracedStates are the states that become spans (docs/design.md §4). ready is the
// agent's own time between calls: the gap between spans shows it.
var tracedStates = map[string]bool{
	string(runstate.Deciding): true, string(runstate.ExecutingTools): true, string(runstate.Paused): true,
}

// Tracer keeps one trace per run: the run span, the span of the state the
// run is in, and a child span per upstream call. Spans are keyed by run id
// here, so that the pipeline carries no OTel type.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	prop propagation.TraceContext
	max  int

	mu   sync.Mutex
	runs map[string]*runTrace
	age  uint64
}

type runTrace struct {
	ctx      context.Context // holds the run span
	span     trace.Span
	state    trace.Span // nil outside a traced state
	stateCtx context.Context
	age      uint64
	labelled bool // session, tenant and team set
}

// NewTracer starts tracing, or returns nil (off) when o names no exporter.
func NewTracer(ctx context.Context, o TraceOptions) (*Tracer, error) {
	var proc sdktrace.SpanProcessor
	switch {
	case o.Exporter != nil:
		proc = sdktrace.NewSimpleSpanProcessor(o.Exporter)
	case o.Endpoint != "":
		u, err := url.Parse(o.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("otlp endpoint %q: want an http(s) URL", o.Endpoint)
		}
		if strings.Trim(u.Path, "/") == "" {
			u.Path = "/v1/traces"
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		proc = sdktrace.NewBatchSpanProcessor(exp)
	default:
		return nil, nil
	}
	if o.MaxRuns <= 0 {
		o.MaxRuns = defaultMaxRuns
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "haltline"))))
	return &Tracer{tp: tp, tr: tp.Tracer(tracerName), max: o.MaxRuns, runs: map[string]*runTrace{}}, nil
}

// Shutdown ends the spans still open and flushes the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	now := time.Now()
	for id, rt := range t.runs {
		rt.end(now, "gateway stopped")
		delete(t.runs, id)
	}
	t.mu.Unlock()
	return t.tp.Shutdown(ctx)
}

// OpenRuns is the number of runs whose spans are open.
func (t *Tracer) OpenRuns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.runs)
}

// run returns the run's trace, starting it at at when absent. The caller
// holds t.mu.
func (t *Tracer) run(runID string, at time.Time, resumedFrom string) *runTrace {
	if rt := t.runs[runID]; rt != nil {
		return rt
	}
	if len(t.runs) >= t.max {
		t.evictOldest(at)
	}
	// Runs are keyed by their scoped id; spans show the name the agent
	// knows (the tenant is a span attribute of its own).
	attrs := []attribute.KeyValue{attribute.String(attrRunID, runstate.NameOf(runID))}
	if resumedFrom != "" {
		// A resumed (or restored) run: its first segment's trace ended
		// with its termination.
		attrs = append(attrs, attribute.String(attrResumed, resumedFrom))
	}
	ctx, span := t.tr.Start(context.Background(), SpanRun, trace.WithTimestamp(at),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithNewRoot(), trace.WithAttributes(attrs...))
	t.age++
	rt := &runTrace{ctx: ctx, span: span, age: t.age}
	t.runs[runID] = rt
	return rt
}

func (t *Tracer) evictOldest(at time.Time) {
	var oldest string
	var age uint64
	for id, rt := range t.runs {
		if oldest == "" || rt.age < age {
			oldest, age = id, rt.age
		}
	}
	if rt := t.runs[oldest]; rt != nil {
		rt.end(at, "trace evicted: too many open runs")
		delete(t.runs, oldest)
	}
}

// end closes the state span and the run span, unset status: the run did
// not end while traced here.
func (rt *runTrace) end(at time.Time, why string) {
	rt.endState(at)
	rt.span.AddEvent(why, trace.WithTimestamp(at))
	rt.span.End(trace.WithTimestamp(at))
}

func (rt *runTrace) endState(at time.Time) {
	if rt.state != nil {
		rt.state.End(trace.WithTimestamp(at))
		rt.state, rt.stateCtx = nil, nil
	}
}

// Transition moves the run's state span: the old state's span ends, a new
// one starts when the state is traced. A final state is left to RunEnded,
// which reports first and carries the reason.
func (t *Tracer) Transition(runID, from, to string, at time.Time) {
	if t == nil || runstate.State(to).Final() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	resumed := ""
	if from != "" && t.runs[runID] == nil {
		resumed = from
	}
	rt := t.run(runID, at, resumed)
	rt.endState(at)
	if tracedStates[to] {
		rt.stateCtx, rt.state = t.tr.Start(rt.ctx, to, trace.WithTimestamp(at))
	}
}

// UpstreamStart opens the call's client span under the current state span
// and writes traceparent through set.
func (t *Tracer) UpstreamStart(runID, api, provider, model string, set func(key, value string)) trace.Span {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	now := time.Now()
	rt := t.run(runID, now, "")
	parent := rt.ctx
	if rt.stateCtx != nil {
		parent = rt.stateCtx
	}
	t.mu.Unlock()
	ctx, span := t.tr.Start(parent, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(now),
		trace.WithAttributes(
			attribute.String(attrGenAIOperation, "chat"),
			attribute.String(attrGenAISystem, provider),
			attribute.String(attrGenAIProvider, provider),
			attribute.String(attrGenAIRequestModel, model),
			attribute.String(attrAPI, api),
			attribute.String(attrRunID, runstate.NameOf(runID)),
		))
	if set != nil {
		t.prop.Inject(ctx, setter(set))
	}
	return span
}

// setter adapts a header setter to the propagator's carrier.
type setter func(key, value string)

func (s setter) Get(string) string        { return "" }
func (s setter) Set(key, value string)    { s(key, value) }
func (s setter) Keys() []string           { return nil }
func (t *Tracer) spanOf(c any) trace.Span { s, _ := c.(trace.Span); return s }

// CallDone ends the call's span with its usage and outcome, and labels the
// run span with who the run belongs to.
func (t *Tracer) CallDone(c pipeline.CallReport) {
	if t == nil {
		return
	}
	if c.RunID != "" {
		t.mu.Lock()
		if rt := t.runs[c.RunID]; rt != nil && !rt.labelled {
			rt.labelled = true
			rt.span.SetAttributes(attribute.String(attrSessionID, c.SessionID),
				attribute.String(attrTenant, c.Tenant), attribute.String(attrTeam, c.Team))
		}
		t.mu.Unlock()
	}
	span := t.spanOf(c.Trace)
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.Int(attrHTTPStatus, c.Status),
		attribute.Int64(attrStep, c.Step),
		attribute.Int64(attrGenAIInputTokens, c.Usage.InputTokens),
		attribute.Int64(attrGenAIOutputTokens, c.Usage.OutputTokens),
		attribute.Int64(attrReasoningTokens, c.Usage.ReasoningTokens),
		attribute.Int64(attrCachedTokens, c.Usage.CachedTokens),
		attribute.Float64(attrCostUSD, c.Cost.USD()),
		attribute.Bool(attrWrapUp, c.WrapUp),
	}
	if c.FinishReason != "" {
		attrs = append(attrs, attribute.StringSlice(attrGenAIFinishReasons, []string{c.FinishReason}))
	}
	if c.FirstByte > 0 {
		attrs = append(attrs, attribute.Int64(attrFirstByteMs, c.FirstByte.Milliseconds()))
	}
	span.SetAttributes(attrs...)
	switch {
	case c.Err != nil:
		span.SetStatus(codes.Error, c.Err.Error())
	case c.Status >= 400 || c.Status == 0:
		span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", c.Status))
	}
	end := c.End
	if end.IsZero() {
		end = time.Now()
	}
	span.End(trace.WithTimestamp(end))
}

// RunEnded puts the termination on the run span — as its status and as an
// event with the reason and evidence — and ends the run's spans.
func (t *Tracer) RunEnded(e pipeline.RunEnd) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	rt := t.runs[e.RunID]
	if rt == nil {
		return // ended before this process traced it
	}
	delete(t.runs, e.RunID)
	at := e.At
	if at.IsZero() {
		at = time.Now()
	}
	rt.endState(at)
	attrs := []attribute.KeyValue{
		attribute.String(attrState, e.State), attribute.String(attrReason, e.Reason),
		attribute.Int64(attrStep, e.Step),
	}
	for _, kv := range [][2]string{{attrDetail, e.Detail}, {attrDetector, e.Detector}, {attrMode, e.Mode},
		{attrLastTool, e.LastTool}, {attrArgsHash, e.ArgumentsHash}} {
		if kv[1] != "" {
			attrs = append(attrs, attribute.String(kv[0], kv[1]))
		}
	}
	rt.span.AddEvent(EventRunEnded, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	rt.span.SetAttributes(attribute.String(attrState, e.State), attribute.String(attrReason, e.Reason))
	switch runstate.State(e.State) {
	case runstate.Completed, runstate.CompletedWithDegradation:
		rt.span.SetStatus(codes.Ok, "")
	default:
		rt.span.SetStatus(codes.Error, e.Reason)
	}
	rt.span.End(trace.WithTimestamp(at))
}

// TraceID is the run's trace id while its spans are open, for log lines.
func (t *Tracer) TraceID(runID string) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rt := t.runs[runID]; rt != nil {
		return rt.span.SpanContext().TraceID().String()
	}
	return ""
}
