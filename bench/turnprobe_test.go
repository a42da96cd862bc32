package main

import (
	"bufio"
	"fmt"
	"math"
	"slices"
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
	// hist is the text of a histogram with these cumulative counts at
	// 10 µs, 100 µs, 1 ms and +Inf.
	hist := func(c ...int) map[float64]uint64 {
		return scrape(fmt.Sprintf("# TYPE haltline_gc_pause_seconds histogram\n"+
			"haltline_gc_pause_seconds_bucket{le=\"1e-05\"} %d\nhaltline_gc_pause_seconds_bucket{le=\"0.0001\"} %d\n"+
			"haltline_gc_pause_seconds_bucket{le=\"0.001\"} %d\nhaltline_gc_pause_seconds_bucket{le=\"+Inf\"} %d\n"+
			"haltline_gc_pause_seconds_sum 0.0002\nhaltline_gc_pause_seconds_count %d\n", c[0], c[1], c[2], c[3], c[3]))
	}
	before, after := hist(4, 10, 10, 10), hist(6, 13, 14, 14)
	var g gcPauses
	g.add(before, after)
	if g.Count != 4 || g.MaxUs != 1000 || g.Longer {
		t.Fatalf("%+v", g)
	}
	if g.Buckets["1e-05"] != 2 || g.Buckets["0.0001"] != 1 || g.Buckets["0.001"] != 1 {
		t.Fatalf("buckets %v", g.Buckets)
	}
	over := hist(6, 13, 14, 15)
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

// A measure that keeps growing after the warm-up fails the soak; one that
// levels off within it, or moves within the tolerance, does not.
func TestSoakTrends(t *testing.T) {
	flat := func(i int) soakSample {
		return soakSample{At: time.Duration(i) * time.Second, Requests: int64(1000 * (i + 1)), RSSKB: 100 << 10, Goroutines: 40,
			StoreBytes: 1<<20 + int64(1000*(i+1))*500, LogBytes: int64(i%3) << 20,
			CPUPerRequest: 200 * time.Microsecond, WrittenPerRequest: 3000}
	}
	var samples []soakSample
	for i := range 12 {
		s := flat(i)
		if i < 2 {
			s.RSSKB = 20 << 10 // the warm-up: the heap still growing to its goal
		}
		samples = append(samples, s)
	}
	if bad, err := soakTrends(samples, 2*time.Second); err != nil || len(bad) > 0 {
		t.Fatalf("a level soak: %v, %v", bad, err)
	}
	if bad, _ := soakTrends(samples, 0); len(bad) != 1 || !strings.Contains(bad[0], "RSS") {
		t.Fatalf("the warm-up read as a trend: %v", bad)
	}
	leaking := slices.Clone(samples)
	for i := range leaking {
		leaking[i].Goroutines += int64(10 * i)
		leaking[i].StoreBytes += int64(i*i) << 20 // pages not reused: faster than the requests
	}
	bad, err := soakTrends(leaking, 2*time.Second)
	if err != nil || len(bad) != 2 || !strings.Contains(bad[0], "goroutines") || !strings.Contains(bad[1], "store file per request") {
		t.Fatalf("leaks: %v, %v", bad, err)
	}
	slowing := slices.Clone(samples)
	for i := range slowing {
		slowing[i].CPUPerRequest += time.Duration(i) * 20 * time.Microsecond // the store's work grows with its size
		slowing[i].WrittenPerRequest += int64(i) << 10
	}
	bad, err = soakTrends(slowing, 2*time.Second)
	if err != nil || len(bad) != 2 || !strings.Contains(bad[0], "CPU per request") || !strings.Contains(bad[1], "disk written per request") {
		t.Fatalf("a call growing costlier: %v, %v", bad, err)
	}
	if _, err := soakTrends(samples[:4], 2*time.Second); err == nil {
		t.Fatal("two samples after the warm-up: want an error")
	}
}
