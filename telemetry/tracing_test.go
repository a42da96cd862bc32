package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/haltline/haltline/pipeline"
)

func newTestTracer(t *testing.T, maxRuns int) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := NewTracer(context.Background(), TraceOptions{Exporter: exp, MaxRuns: maxRuns})
	if err != nil {
		t.Fatal(err)
	}
	return tr, exp
}

func TestTracerOff(t *testing.T) {
	t.Parallel()
	tr, err := NewTracer(context.Background(), TraceOptions{})
	if err != nil || tr != nil {
		t.Fatalf("no endpoint, no exporter: %v, %v", tr, err)
	}
	// A nil tracer is safe to call.
	tr.Transition("r", "", "ready", time.Now())
	tr.RunEnded(pipeline.RunEnd{RunID: "r"})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTracer(context.Background(), TraceOptions{Endpoint: "not a url"}); err == nil {
		t.Fatal("a bad endpoint was accepted")
	}
}

// The open runs are bounded: the oldest run's spans end when the bound is
// reached, and Shutdown ends the rest.
func TestTracerBoundedRuns(t *testing.T) {
	t.Parallel()
	tr, exp := newTestTracer(t, 2)
	at := time.Now()
	for i, id := range []string{"r-1", "r-2", "r-3"} {
		tr.Transition(id, "", "ready", at.Add(time.Duration(i)*time.Millisecond))
		tr.Transition(id, "ready", "deciding", at.Add(time.Duration(i)*time.Millisecond))
	}
	if n := tr.OpenRuns(); n != 2 {
		t.Fatalf("%d open runs, want 2", n)
	}
	// r-1's run and deciding spans ended on eviction, the others are open.
	names := map[string]int{}
	for _, s := range exp.GetSpans() {
		names[s.Name+" "+attrsOf(s.Attributes)[attrRunID].AsString()]++
	}
	if len(exp.GetSpans()) != 2 || names["run r-1"] != 1 {
		t.Fatalf("ended spans %v, want r-1's run and deciding spans", names)
	}
	// Shutdown ends the rest (the in-memory exporter forgets them on its
	// own shutdown, so only the count of open runs can be checked).
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := tr.OpenRuns(); n != 0 {
		t.Fatalf("%d runs open after shutdown", n)
	}
}

// A resumed run starts a new trace that says where it came from, and ends
// with its own status.
func TestTracerResumedRun(t *testing.T) {
	t.Parallel()
	tr, exp := newTestTracer(t, 0)
	at := time.Now()
	tr.Transition("r-1", "", "ready", at)
	tr.RunEnded(pipeline.RunEnd{RunID: "r-1", State: "terminated", Reason: "max_steps", At: at.Add(time.Second)})
	tr.Transition("r-1", "terminated", "ready", at.Add(2*time.Second))
	tr.RunEnded(pipeline.RunEnd{RunID: "r-1", State: "completed", Reason: "completed", At: at.Add(3 * time.Second)})
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	if spans[0].Status.Code != codes.Error || spans[0].Status.Description != "max_steps" || spans[1].Status.Code != codes.Ok {
		t.Fatalf("statuses %v, %v", spans[0].Status, spans[1].Status)
	}
	if a := attrsOf(spans[1].Attributes); a[attrResumed].AsString() != "terminated" {
		t.Fatalf("resumed run attributes %v", spans[1].Attributes)
	}
}

func attrsOf(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}
