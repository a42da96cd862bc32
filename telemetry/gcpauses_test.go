package telemetry

import (
	"math"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A runtime bucket counts in the first bound at or above its upper bound:
// a pause is never reported shorter than it was.
func TestRebucket(t *testing.T) {
	h := &metrics.Float64Histogram{
		Buckets: []float64{math.Inf(-1), 5e-6, 9e-6, 15e-6, 1.5e-3, 2e-3, math.Inf(1)},
		Counts:  []uint64{0, 3, 2, 0, 1, 4},
	}
	count, sum, b := rebucket(h, []float64{10e-6, 20e-6, 2e-3})
	if count != 10 {
		t.Fatalf("count %d", count)
	}
	// 5–9 µs under 10 µs; 9–15 µs under 20 µs; 1.5–2 ms under 2 ms; the
	// open bucket past 2 ms in none (the +Inf one is implicit).
	want := map[float64]uint64{10e-6: 3, 20e-6: 5, 2e-3: 6}
	for k, v := range want {
		if b[k] != v {
			t.Errorf("le %g: %d, want %d (%v)", k, b[k], v, b)
		}
	}
	if wantSum := 3*7e-6 + 2*12e-6 + 1.75e-3 + 4*2e-3; math.Abs(sum-wantSum) > 1e-9 {
		t.Errorf("sum %g, want %g", sum, wantSum)
	}
}

// The histogram is exported with the runtime's pauses: a collection run
// here shows in its count.
func TestGCPausesExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterGCPauses(reg); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	n, err := testutil.GatherAndCount(reg, "haltline_gc_pause_seconds")
	if err != nil || n != 1 {
		t.Fatalf("%d series, %v", n, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := mfs[0].GetMetric()[0].GetHistogram()
	if hist.GetSampleCount() == 0 || len(hist.GetBucket()) != len(GCPauseBuckets) {
		t.Fatalf("histogram %v", hist)
	}
	if !strings.HasPrefix(mfs[0].GetHelp(), "Stop-the-world") {
		t.Fatalf("help %q", mfs[0].GetHelp())
	}
}
