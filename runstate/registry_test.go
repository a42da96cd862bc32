package runstate

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestRegistryLineageAndRemove(t *testing.T) {
	t.Parallel()
	g := NewRegistry()
	r, created := g.GetOrCreate(Identity{ID: "r-1", SessionID: "s-1"})
	if !created {
		t.Fatal("not created")
	}
	g.Index(KeyToolCall+"call_1", r.ID)
	if g.Lookup(KeyToolCall+"call_1") != r {
		t.Fatal("lookup")
	}
	r.Mu.Lock()
	r.Transition(Completed, time.Now().Add(-time.Hour), "done")
	r.Mu.Unlock()
	if got := g.Ended(time.Now()); len(got) != 1 {
		t.Fatalf("ended: %d", len(got))
	}
	g.Remove(r.ID, []string{KeyToolCall + "call_1"})
	if g.Get("r-1") != nil || g.Lookup(KeyToolCall+"call_1") != nil || g.Len() != 0 {
		t.Fatal("not removed")
	}
}

// BenchmarkLineageLookup100k looks a tool-call id up among 100,000 live
// runs (3 lineage keys each), and reports the memory a tracked run with its
// keys and a few events takes.
func BenchmarkLineageLookup100k(b *testing.B) {
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := NewRegistry()
	now := time.Now()
	for i := range n {
		id := fmt.Sprintf("r-%012d", i)
		r, _ := g.GetOrCreate(Identity{ID: id, SessionID: "s-" + id, Tenant: "acme"})
		r.Mu.Lock()
		r.Transition(Deciding, now, "")
		r.Transition(ExecutingTools, now, "1 tool call(s)")
		r.Record(now, Event{Type: EventModelCall, Model: "gpt-4o-mini", InputTokens: 500, OutputTokens: 20})
		r.Mu.Unlock()
		for k := range 3 {
			g.Index(fmt.Sprintf("%scall_%d_%d", KeyToolCall, i, k), id)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perRun := float64(after.HeapAlloc-before.HeapAlloc) / n
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		if g.Lookup(fmt.Sprintf("%scall_%d_1", KeyToolCall, i%n)) == nil {
			b.Fatal("miss")
		}
	}
	b.ReportMetric(perRun, "heap-B/run") // after the loop: ResetTimer clears metrics
}
