package runstate

import (
	"testing"
	"time"
)

// TrimEvents lets persisted events leave memory past twice the number
// kept, never one not yet persisted, and the next event goes on from the
// last one's sequence number.
func TestTrimEvents(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := newRun(Identity{ID: "r-trim"}, now)
	add := func(n int) {
		for range n {
			r.Record(now, Event{Type: EventTransition})
		}
	}
	add(8)
	r.TrimEvents(8, 4) // 8 held, not over 2×4: nothing leaves
	if len(r.Events) != 8 || !r.EventsComplete() {
		t.Fatalf("at 2×keep: %d events, complete %v", len(r.Events), r.EventsComplete())
	}
	add(4)
	r.TrimEvents(12, 4)
	if len(r.Events) != 4 || r.Events[0].Seq != 9 || r.EventsComplete() {
		t.Fatalf("trimmed: %d events from seq %d, complete %v", len(r.Events), r.Events[0].Seq, r.EventsComplete())
	}
	add(6) // seqs 13..18, persisted only to 14
	r.TrimEvents(14, 2)
	if len(r.Events) != 4 || r.Events[0].Seq != 15 {
		t.Fatalf("unpersisted events left memory: %d events from seq %d", len(r.Events), r.Events[0].Seq)
	}
	if evs := r.EventsSince(14); len(evs) != 4 || evs[0].Seq != 15 {
		t.Fatalf("events since the last persist: %d", len(evs))
	}
	r.TrimEvents(0, 0) // nothing persisted past what already left
	if len(r.Events) != 4 {
		t.Fatalf("trimmed below what was persisted: %d", len(r.Events))
	}
	r.TrimEvents(18, 0) // everything persisted, nothing kept
	if len(r.Events) != 0 || r.EventsComplete() {
		t.Fatalf("all persisted: %d events, complete %v", len(r.Events), r.EventsComplete())
	}
	add(1)
	if r.Events[0].Seq != 19 {
		t.Fatalf("next event after a trim: seq %d", r.Events[0].Seq)
	}
	if p := r.Export(now); p.LastEventSeq != 19 {
		t.Fatalf("exported last seq %d", p.LastEventSeq)
	}
}
