package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// newTestObserver registers the metrics and the runs collector on a fresh
// registry, with JSON logs into buf.
func newTestObserver(t *testing.T, counts map[runstate.State]int) (*prometheus.Registry, *Metrics, *Observer, *bytes.Buffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := New(reg)
	if err := RegisterRunStates(reg, func() map[runstate.State]int { return counts }); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return reg, m, NewObserver(m, nil, log), &buf
}

// A scripted sequence of observations moves every metric by a known amount.
func TestObserverMetricValues(t *testing.T) {
	t.Parallel()
	reg, m, o, _ := newTestObserver(t, map[runstate.State]int{runstate.Deciding: 2, runstate.Terminated: 1})
	u := wire.Usage{InputTokens: 1000, OutputTokens: 200, ReasoningTokens: 50, CachedTokens: 300}
	for i := range 3 {
		o.ModelCall(pipeline.CallReport{API: "openai.chat", Status: 200, Total: 120 * time.Millisecond,
			Upstream: 100 * time.Millisecond, FirstByte: 40 * time.Millisecond, Step: int64(i + 1),
			Team: "red", Cost: accounting.USD(0.25)})
		o.Usage("openai", "gpt-4o-mini", u, accounting.USD(0.25))
	}
	o.ModelCall(pipeline.CallReport{API: "anthropic.messages", Status: 429, Total: time.Millisecond}) // answered by the gateway
	o.RunStarted()
	o.RunStarted()
	o.RunEnded(pipeline.RunEnd{RunID: "r-1", State: "terminated", Reason: "loop_detected", Detector: "same_in_row"})
	o.Termination("loop_detected", "enforce")
	o.Termination("max_steps", "shadow")
	o.Reservation("ok")
	o.Reservation("ok")
	o.Reservation("wrap_up")
	o.LoopDetection("same_in_row", "enforce")
	o.Compression("openai.chat", 10000, 4000)
	o.PolicyDecision(policy.Decision{Package: "haltline.model", Verdict: "allow", Summary: "allow max_output_tokens=0", Duration: 30 * time.Microsecond})
	o.PolicyDecision(policy.Decision{Package: "haltline.tool", Verdict: "deny", Summary: "deny approval=false level=L2 reason=\"x\"", Duration: time.Microsecond})
	o.PolicyDecision(policy.Decision{Package: "haltline.budget", Summary: "max_steps=100", Duration: time.Microsecond})
	o.PolicyDecision(policy.Decision{Package: "haltline.tool", Err: errors.New("boom"), Summary: "error"})

	for _, tc := range []struct {
		desc string
		c    prometheus.Collector
		want float64
	}{
		{"ok calls", m.Calls.WithLabelValues("openai.chat", "200"), 3},
		{"refused call", m.Calls.WithLabelValues("anthropic.messages", "429"), 1},
		{"input tokens", m.Tokens.WithLabelValues("openai", "gpt-4o-mini", "input"), 3000},
		{"output tokens", m.Tokens.WithLabelValues("openai", "gpt-4o-mini", "output"), 600},
		{"reasoning tokens", m.Tokens.WithLabelValues("openai", "gpt-4o-mini", "reasoning"), 150},
		{"cached tokens", m.Tokens.WithLabelValues("openai", "gpt-4o-mini", "cached"), 900},
		{"cost", m.Cost.WithLabelValues("openai", "gpt-4o-mini"), 0.75},
		{"team spend", m.TeamCost.WithLabelValues("red"), 0.75},
		{"runs started", m.RunsStarted, 2},
		{"runs active", m.RunsActive, 1},
		{"runs ended", m.RunsEnded.WithLabelValues("terminated", "loop_detected"), 1},
		{"enforced termination", m.Terminations.WithLabelValues("loop_detected", "enforce"), 1},
		{"shadow termination", m.Terminations.WithLabelValues("max_steps", "shadow"), 1},
		{"reservations ok", m.Reservations.WithLabelValues("ok"), 2},
		{"reservations wrap-up", m.Reservations.WithLabelValues("wrap_up"), 1},
		{"loop detections", m.LoopDetections.WithLabelValues("same_in_row", "enforce"), 1},
		{"compressions", m.Compressions.WithLabelValues("openai.chat"), 1},
		{"tokens removed", m.TokensRemoved.WithLabelValues("openai.chat"), 6000},
		{"policy allow", m.Decisions.WithLabelValues("haltline.model", "allow"), 1},
		{"policy deny", m.Decisions.WithLabelValues("haltline.tool", "deny"), 1},
		{"policy answer", m.Decisions.WithLabelValues("haltline.budget", "answer"), 1},
		{"policy error", m.Decisions.WithLabelValues("haltline.tool", "error"), 1},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.desc, got, tc.want)
		}
	}
	// Histograms: one observation per forwarded call, none for the refusal.
	for _, tc := range []struct {
		desc, name string
		want       int
	}{
		{"first byte", "haltline_upstream_first_byte_seconds", 1},
		{"overhead", "haltline_gateway_overhead_seconds", 2},
		{"duration", "haltline_model_call_duration_seconds", 2},
		{"policy time", "haltline_policy_evaluation_seconds", 3},
		{"compression ratio", "haltline_context_compression_ratio", 1},
	} {
		if n := testutil.CollectAndCount(reg, tc.name); n != tc.want {
			t.Errorf("%s: %d series, want %d", tc.desc, n, tc.want)
		}
	}
	want := `# HELP haltline_runs Runs held by the gateway, by state, counted at scrape time.
# TYPE haltline_runs gauge
haltline_runs{state="cancelled"} 0
haltline_runs{state="completed"} 0
haltline_runs{state="completed_with_degradation"} 0
haltline_runs{state="deciding"} 2
haltline_runs{state="executing_tools"} 0
haltline_runs{state="failed"} 0
haltline_runs{state="paused"} 0
haltline_runs{state="ready"} 0
haltline_runs{state="terminated"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "haltline_runs"); err != nil {
		t.Error(err)
	}
}

// Every metric name passes promlint, once each family has a series.
func TestMetricNamesLint(t *testing.T) {
	t.Parallel()
	reg, _, o, _ := newTestObserver(t, map[runstate.State]int{})
	o.ModelCall(pipeline.CallReport{API: "openai.chat", Status: 200, Total: time.Second, Upstream: time.Second, FirstByte: time.Millisecond})
	o.Usage("openai", "gpt-4o-mini", wire.Usage{InputTokens: 1}, 1)
	o.RunStarted()
	o.RunEnded(pipeline.RunEnd{State: "completed", Reason: "completed"})
	o.Termination("max_steps", "enforce")
	o.Reservation("ok")
	o.LoopDetection("window", "shadow")
	o.Compression("openai.chat", 10, 5)
	o.PolicyDecision(policy.Decision{Package: "haltline.model", Verdict: "allow"})
	if err := RegisterStoreReadCache(reg, func() uint64 { return 3 }, func() uint64 { return 5 }); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "haltline_") {
			t.Errorf("%s: want the haltline_ prefix", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "run_id", "session_id", "agent_id":
					t.Errorf("%s has the unbounded label %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
}

// The store's read cache counts are read at scrape time.
func TestStoreReadCacheMetric(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	hits := uint64(3)
	if err := RegisterStoreReadCache(reg, func() uint64 { return hits }, func() uint64 { return 5 }); err != nil {
		t.Fatal(err)
	}
	hits = 4
	want := `# HELP haltline_store_read_cache_reads_total Reads of the embedded store's cached records (run snapshots, lineage keys, stored tool outputs), by result (hit, miss).
# TYPE haltline_store_read_cache_reads_total counter
haltline_store_read_cache_reads_total{result="hit"} 4
haltline_store_read_cache_reads_total{result="miss"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// The per-call and per-termination log lines carry the fixed keys, and no
// others.
func TestLogLinesKeys(t *testing.T) {
	t.Parallel()
	_, _, o, buf := newTestObserver(t, nil)
	o.ModelCall(pipeline.CallReport{RunID: "r-1", SessionID: "s-1", Tenant: "acme", Team: "red", API: "openai.chat",
		Model: "gpt-4o-mini", Status: 200, Step: 2, Total: 3 * time.Millisecond, Upstream: 2 * time.Millisecond,
		Usage: wire.Usage{InputTokens: 10, OutputTokens: 5}, Cost: accounting.USD(0.001), FinishReason: "tool_calls", ToolCalls: 1})
	o.RunEnded(pipeline.RunEnd{RunID: "r-1", SessionID: "s-1", Tenant: "acme", Team: "red", State: "terminated",
		Reason: "loop_detected", Detector: "same_in_row", Step: 4, LastTool: "query_logs", ArgumentsHash: "fp:abc"})
	allowed := map[string]bool{"time": true, "level": true, "msg": true}
	for _, k := range []string{KeyRunID, KeySessionID, KeyTenant, KeyTeam, KeyAPI, KeyModel, KeyStatus, KeyStep,
		KeyInputTokens, KeyOutputTokens, KeyCostUSD, KeyDurationMs, KeyOverheadMs, KeyUpstreamMs, KeyFirstByteMs,
		KeyFinishReason, KeyToolCalls, KeyWrapUp, KeyReason, KeyDetail, KeyDetector, KeyMode, KeyTool, KeyArgsHash,
		KeyTraceID, KeyError} {
		allowed[k] = true
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, tc := range []struct {
		desc, msg string
		want      map[string]any
	}{
		{"call line", MsgModelCall, map[string]any{KeyRunID: "r-1", KeyTenant: "acme", KeyStatus: 200.0, KeyStep: 2.0,
			KeyInputTokens: 10.0, KeyOutputTokens: 5.0, KeyCostUSD: 0.001, KeyDurationMs: 3.0, KeyOverheadMs: 1.0}},
		{"termination line", MsgRunEnded, map[string]any{KeyRunID: "r-1", KeyStatus: "terminated", KeyReason: "loop_detected",
			KeyDetector: "same_in_row", KeyStep: 4.0, KeyArgsHash: "fp:abc"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var line map[string]any
			for _, l := range lines {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatal(err)
				}
				if m["msg"] == tc.msg {
					line = m
				}
			}
			if line == nil {
				t.Fatalf("no %q line in %s", tc.msg, buf.String())
			}
			for k := range line {
				if !allowed[k] {
					t.Errorf("key %q is not in logkeys.go", k)
				}
			}
			for k, v := range tc.want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v", k, line[k], v)
				}
			}
		})
	}
}

// Without a tracer the observer's trace hooks do nothing and return nil.
func TestObserverWithoutTracer(t *testing.T) {
	t.Parallel()
	_, _, o, _ := newTestObserver(t, nil)
	o.Transition("r-1", "", "ready", time.Now())
	called := false
	if h := o.UpstreamStart("r-1", "openai.chat", "openai", "m", func(string, string) { called = true }); h != nil || called {
		t.Fatalf("tracing off: handle %v, header set %t", h, called)
	}
	if err := o.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkUsage is the metrics of one call's usage: six series.
func BenchmarkUsage(b *testing.B) {
	m := New(prometheus.NewRegistry())
	u := wire.Usage{InputTokens: 900, OutputTokens: 18, CachedTokens: 256}
	b.ReportAllocs()
	for b.Loop() {
		m.Usage("openai", "gpt-4o-mini", u, 72_000_000)
	}
}
