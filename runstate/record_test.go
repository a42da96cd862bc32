package runstate

import (
	"testing"
	"time"
)

// TestRecordActivity: the record names the last model called, the time of
// the last event and how long the run has been idle since.
func TestRecordActivity(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := newRun(Identity{ID: "r-1"}, t0)
	rec := r.Snapshot(t0.Add(time.Second))
	if rec.Model != "" || rec.LastActivity != t0.Format(time.RFC3339Nano) || rec.IdleMs != 1000 {
		t.Fatalf("fresh run: model %q, last activity %q, idle %d ms", rec.Model, rec.LastActivity, rec.IdleMs)
	}
	r.Record(t0.Add(2*time.Second), Event{Type: EventModelCall, Model: "gpt-4o", Status: 200})
	r.Record(t0.Add(3*time.Second), Event{Type: EventModelCall, Model: "claude-haiku-4-5", Status: 200})
	last := t0.Add(5 * time.Second)
	r.Record(last, Event{Type: EventToolCall, Tool: "read_page"})
	rec = r.Snapshot(last.Add(90 * time.Second))
	if rec.Model != "claude-haiku-4-5" || rec.LastActivity != last.Format(time.RFC3339Nano) || rec.IdleMs != 90_000 {
		t.Fatalf("model %q, last activity %q, idle %d ms", rec.Model, rec.LastActivity, rec.IdleMs)
	}
}
