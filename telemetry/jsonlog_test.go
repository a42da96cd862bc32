package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/slogtest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/haltline/haltline/policy"
)

func TestJSONHandlerIsAHandler(t *testing.T) {
	var buf bytes.Buffer
	slogtest.Run(t, func(*testing.T) slog.Handler {
		buf.Reset()
		return NewJSONHandler(&buf, nil)
	}, func(t *testing.T) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%v: %s", err, buf.Bytes())
		}
		return m
	})
}

// The fast path writes the bytes slog's JSON handler writes.
func TestJSONHandlerWritesWhatSlogWrites(t *testing.T) {
	at := time.Date(2026, 11, 30, 17, 55, 1, 123456789, time.UTC)
	floats := []float64{0, -0.0, 1, -1.5, 0.0001458, 1e-6, 9.99e-7, 1e-9, 123456.789, 1e20, 1e21, 1.5e300, -2.5e-300, math.SmallestNonzeroFloat64, math.MaxFloat64}
	cases := [][]slog.Attr{
		{slog.String("run_id", "r-1"), slog.Int("status", 200), slog.Int64("step", -3), slog.Uint64("n", math.MaxUint64),
			slog.Bool("wrap_up", false), slog.Duration("d", 1500*time.Millisecond)},
		{slog.String("s", "quote \" backslash \\ nl \n tab \t ctl \x01 html <&> uni é \u2028 bad \xff")},
		{slog.String("", "empty key"), {}, slog.String("k", "")},
		{slog.Float64("nan", math.NaN())},     // slow path
		{slog.Time("t", at)},                  // slow path
		{slog.Any("err", errors.New("boom"))}, // slow path
		{slog.Group("g", slog.Int("a", 1))},   // slow path
		{slog.Any("v", slog.IntValue(7))},     // resolves to an int
		{slog.Any("lv", logValuer{})},         // a LogValuer: resolved
	}
	for _, f := range floats {
		cases = append(cases, []slog.Attr{slog.Float64("f", f)})
	}
	for i, attrs := range cases {
		for _, with := range [][]slog.Attr{nil, {slog.String("component", "proxy"), slog.Float64("x", 0.25)}} {
			var got, want bytes.Buffer
			var gh, wh slog.Handler = NewJSONHandler(&got, nil), slog.NewJSONHandler(&want, nil)
			if with != nil {
				gh, wh = gh.WithAttrs(with), wh.WithAttrs(with)
			}
			for _, h := range []slog.Handler{gh, wh} {
				r := slog.NewRecord(at, slog.LevelWarn, "model call \"x\"", 0)
				r.AddAttrs(attrs...)
				if err := h.Handle(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if got.String() != want.String() {
				t.Errorf("case %d (with %v):\n got %s\nwant %s", i, with != nil, got.String(), want.String())
			}
			// The call lines' way in (no slog.Record) writes the same.
			got.Reset()
			if err := gh.(*jsonHandler).handleAttrs(at, slog.LevelWarn, "model call \"x\"", attrs); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("case %d (with %v), handleAttrs:\n got %s\nwant %s", i, with != nil, got.String(), want.String())
			}
		}
	}
}

type logValuer struct{}

func (logValuer) LogValue() slog.Value { return slog.StringValue("resolved") }

func TestJSONHandlerLevels(t *testing.T) {
	var buf bytes.Buffer
	h := NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})
	l := slog.New(h)
	l.Info("quiet")
	l.Warn("loud", "k", 1)
	if strings.Contains(buf.String(), "quiet") || !strings.Contains(buf.String(), `"level":"WARN","msg":"loud","k":1`) {
		t.Fatalf("%s", buf.String())
	}
}

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
	logAttrs := func(l *slog.Logger) { l.LogAttrs(context.Background(), slog.LevelInfo, MsgModelCall, attrs...) }
	for _, bc := range []struct {
		name string
		h    slog.Handler
		log  func(*slog.Logger)
	}{
		{"haltline", NewJSONHandler(io.Discard, nil), func(l *slog.Logger) { logLine(l, MsgModelCall, attrs) }},
		{"haltline/LogAttrs", NewJSONHandler(io.Discard, nil), logAttrs},
		{"slog", slog.NewJSONHandler(io.Discard, nil), logAttrs},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := slog.New(bc.h)
			b.ReportAllocs()
			for b.Loop() {
				bc.log(l)
			}
		})
	}
}

// Any string, float or integer is written as slog writes it.
func FuzzJSONHandler(f *testing.F) {
	f.Add("r-1", "hello", 0.0001458, int64(200))
	f.Add("k\"\\", "<&>\u2028\xff\x01", 1e-7, int64(-1))
	f.Add("", "", 1e21, int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, key, s string, x float64, n int64) {
		var got, want bytes.Buffer
		at := time.Unix(0, n).UTC()
		for _, h := range []slog.Handler{NewJSONHandler(&got, nil), slog.NewJSONHandler(&want, nil)} {
			r := slog.NewRecord(at, slog.LevelInfo, s, 0)
			r.AddAttrs(slog.String(key, s), slog.Float64("f", x), slog.Int64(key, n))
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		// slog writes \b and \f as \u0008 and \u000c (encoding/json before
		// Go 1.22): the same JSON, so the lines are compared token by
		// token, numbers as written.
		if g, w := tokens(t, got.Bytes()), tokens(t, want.Bytes()); !slices.Equal(g, w) {
			t.Fatalf("\n got %s\nwant %s", got.String(), want.String())
		}
	})
}

func tokens(t *testing.T, line []byte) []any {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var out []any
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		out = append(out, tok)
	}
}

// BenchmarkPolicyDecision is the observer's work for one policy answer at
// the default level (several per call): the metrics, and no debug line.
func BenchmarkPolicyDecision(b *testing.B) {
	o := NewObserver(New(prometheus.NewRegistry()), nil, slog.New(NewJSONHandler(io.Discard, nil)))
	d := policy.Decision{Package: "haltline.model", RunID: "r-abcdef0123", Subject: "gpt-4o-mini",
		Verdict: "allow", Duration: 3 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		o.PolicyDecision(d)
	}
}
