package telemetry

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/haltline/haltline/policy"
)

// BenchmarkCallLine is the per-call log line (its attributes as the
// observer builds them) through slog's JSON handler.
func BenchmarkCallLine(b *testing.B) {
	attrs := []slog.Attr{
		slog.String(KeyRunID, "r-abcdef0123"), slog.String(KeySessionID, "s-r-abcdef0123"),
		slog.String(KeyTenant, ""), slog.String(KeyTeam, ""),
		slog.String(KeyAPI, "openai.chat"), slog.String(KeyModel, "gpt-4o-mini"), slog.Int(KeyStatus, 200),
		slog.Int64(KeyStep, 3), slog.Int64(KeyInputTokens, 900),
		slog.Int64(KeyOutputTokens, 18), slog.Float64(KeyCostUSD, 0.0001458),
		slog.Float64(KeyDurationMs, 1.234), slog.Float64(KeyOverheadMs, 0.123),
		slog.Float64(KeyUpstreamMs, 1.111), slog.Float64(KeyFirstByteMs, 1.111),
		slog.String(KeyFinishReason, "tool_calls"), slog.Int(KeyToolCalls, 1), slog.Bool(KeyWrapUp, false),
	}
	l := slog.New(slog.NewJSONHandler(io.Discard, nil))
	b.ReportAllocs()
	for b.Loop() {
		l.LogAttrs(context.Background(), slog.LevelInfo, MsgModelCall, attrs...)
	}
}

// BenchmarkPolicyDecision is the observer's work for one policy answer at
// the default level (several per call): the metrics, and no debug line.
func BenchmarkPolicyDecision(b *testing.B) {
	o := NewObserver(New(prometheus.NewRegistry()), nil, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	d := policy.Decision{Package: "haltline.model", RunID: "r-abcdef0123", Subject: "gpt-4o-mini",
		Verdict: "allow", Duration: 3 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		o.PolicyDecision(d)
	}
}
