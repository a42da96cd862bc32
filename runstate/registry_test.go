package runstate

import (
	"fmt"
	"runtime"
	"strings"
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
	r.Lock()
	r.Transition(Completed, time.Now().Add(-time.Hour), "done")
	r.Unlock()
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
		r.Lock()
		r.Transition(Deciding, now, "")
		r.Transition(ExecutingTools, now, "1 tool call(s)")
		r.Record(now, Event{Type: EventModelCall, Model: "gpt-4o-mini", InputTokens: 500, OutputTokens: 20})
		r.Unlock()
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

// BenchmarkEndedScan100k is one sweep's search for ended runs among
// 100,000 runs in memory, a tenth of them ended: the sweeper pays it (and
// the same again for overdue runs) every period, whatever the load.
func BenchmarkEndedScan100k(b *testing.B) {
	const n = 100_000
	g := NewRegistry()
	now := time.Now()
	for i := range n {
		r, _ := g.GetOrCreate(Identity{ID: fmt.Sprintf("r-%012d", i)})
		r.Lock()
		r.Transition(Deciding, now, "")
		if i%10 == 0 {
			r.Transition(Completed, now.Add(-time.Minute), "done")
		}
		r.Unlock()
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := g.Ended(now.Add(-time.Second)); len(got) != n/10 {
			b.Fatalf("%d ended runs, want %d", len(got), n/10)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/run")
}

// Records sort newest first and match Since by time: RFC 3339 text drops
// the fraction's trailing zeros, so a run created on a whole second sorted
// as newer than every run later in that second.
func TestFilterOrdersByCreationTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2027, 1, 15, 8, 0, 1, 0, time.UTC)
	at := func(id string, d time.Duration) Record {
		return Record{Identity: Identity{ID: id}, Created: base.Add(d).Format(time.RFC3339Nano)}
	}
	recs := []Record{at("whole", 0), at("later", 999*time.Millisecond), at("next", time.Second),
		at("earlier", -500*time.Millisecond), at("b-tie", 250*time.Millisecond), at("a-tie", 250*time.Millisecond)}
	got := Filter{Limit: 5}.Sort(recs)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if want := "next later a-tie b-tie whole"; strings.Join(ids, " ") != want {
		t.Fatalf("order %v, want %s", ids, want)
	}
	since := Filter{Since: base.Add(100 * time.Millisecond)}
	for _, c := range []struct {
		rec  Record
		want bool
	}{{at("whole", 0), false}, {at("b", 100*time.Millisecond), true}, {at("c", 999*time.Millisecond), true}, {at("d", -time.Hour), false}} {
		if since.Match(c.rec) != c.want {
			t.Errorf("Since match of %s: %v", c.rec.Created, !c.want)
		}
	}
}
