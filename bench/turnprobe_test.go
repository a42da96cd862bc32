package main

import (
	"bufio"
	"math"
	"strings"
	"testing"
	"time"
)

// A turn's pauses are the difference of the cumulative buckets before and
// after it, counted in the bucket they fell in.
func TestGCPausesOfATurn(t *testing.T) {
	scrape := func(text string) map[float64]uint64 {
		t.Helper()
		h, err := parseHistogram(bufio.NewScanner(strings.NewReader(text)), gcPauseMetric)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := scrape(`# TYPE haltline_gc_pause_seconds histogram
haltline_gc_pause_seconds_bucket{le="1e-05"} 4
haltline_gc_pause_seconds_bucket{le="0.0001"} 10
haltline_gc_pause_seconds_bucket{le="0.001"} 10
haltline_gc_pause_seconds_bucket{le="+Inf"} 10
haltline_gc_pause_seconds_sum 0.0002
haltline_gc_pause_seconds_count 10
`)
	after := scrape(`haltline_gc_pause_seconds_bucket{le="1e-05"} 6
haltline_gc_pause_seconds_bucket{le="0.0001"} 13
haltline_gc_pause_seconds_bucket{le="0.001"} 14
haltline_gc_pause_seconds_bucket{le="+Inf"} 14
`)
	var g gcPauses
	g.add(before, after)
	if g.Count != 4 || g.MaxUs != 1000 || g.Longer {
		t.Fatalf("%+v", g)
	}
	if g.Buckets["1e-05"] != 2 || g.Buckets["0.0001"] != 1 || g.Buckets["0.001"] != 1 {
		t.Fatalf("buckets %v", g.Buckets)
	}
	over := scrape(`haltline_gc_pause_seconds_bucket{le="1e-05"} 6
haltline_gc_pause_seconds_bucket{le="0.0001"} 13
haltline_gc_pause_seconds_bucket{le="0.001"} 14
haltline_gc_pause_seconds_bucket{le="+Inf"} 15
`)
	var g2 gcPauses
	g2.add(after, over)
	if g2.Count != 1 || !math.IsInf(g2.longest(), 1) {
		t.Fatalf("a pause past every bound: %+v", g2)
	}
	if m := (*gcPauses)(nil).merge(&g).merge(&g2); m.Count != 5 || !m.Longer || m.MaxUs != 1000 {
		t.Fatalf("merged %+v", m)
	}
	if _, err := parseHistogram(bufio.NewScanner(strings.NewReader("go_goroutines 5\n")), gcPauseMetric); err == nil {
		t.Fatal("no histogram: want an error")
	}
}

func TestQuantile(t *testing.T) {
	d := make([]time.Duration, 1000)
	for i := range d {
		d[i] = time.Duration(i+1) * time.Microsecond
	}
	if p := quantile(d, 0.999); p != 999 {
		t.Fatalf("p99.9 %v", p)
	}
	if p := quantile(d, 0.99); p != 990 {
		t.Fatalf("p99 %v", p)
	}
}
