package telemetry

import (
	"math"
	"runtime/metrics"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// gcPauseMetric is the runtime's histogram of the stop-the-world pauses
// of garbage collection: every call in flight waits them out.
const gcPauseMetric = "/sched/pauses/total/gc:seconds"

// GCPauseBuckets are the upper bounds of haltline_gc_pause_seconds: a
// 1-2-5 series from 10 µs to 1 s. The Go collector's own export of the
// runtime's histograms rounds seconds to powers of ten, too coarse to tell
// a 200 µs pause from a 900 µs one.
var GCPauseBuckets = []float64{
	10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6,
	1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 200e-3, 500e-3, 1,
}

type gcPauseCollector struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	sample []metrics.Sample
}

// RegisterGCPauses exports haltline_gc_pause_seconds, a histogram of the
// garbage collector's stop-the-world pauses since the process started,
// read from the runtime at scrape time.
func RegisterGCPauses(reg prometheus.Registerer) error {
	return reg.Register(&gcPauseCollector{
		desc: prometheus.NewDesc("haltline_gc_pause_seconds",
			"Stop-the-world pauses of the garbage collector since the process started.", nil, nil),
		sample: []metrics.Sample{{Name: gcPauseMetric}},
	})
}

func (c *gcPauseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *gcPauseCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	metrics.Read(c.sample)
	v := c.sample[0].Value
	c.mu.Unlock()
	if v.Kind() != metrics.KindFloat64Histogram {
		return
	}
	count, sum, buckets := rebucket(v.Float64Histogram(), GCPauseBuckets)
	ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, buckets)
}

// rebucket maps a runtime histogram onto cumulative buckets with the given
// upper bounds. A runtime bucket counts in the first bound at or above its
// own upper bound, so a pause is never reported shorter than it was; the
// sum takes each bucket's midpoint (its lower bound for the open last one).
func rebucket(h *metrics.Float64Histogram, bounds []float64) (count uint64, sum float64, buckets map[float64]uint64) {
	per := make([]uint64, len(bounds))
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		count += n
		switch {
		case math.IsInf(hi, 1):
			sum += lo * float64(n)
		case math.IsInf(lo, -1):
			sum += hi * float64(n)
		default:
			sum += (lo + hi) / 2 * float64(n)
		}
		for j, b := range bounds {
			if hi <= b {
				per[j] += n
				break
			}
		}
	}
	buckets = make(map[float64]uint64, len(bounds))
	var cum uint64
	for j, b := range bounds {
		cum += per[j]
		buckets[b] = cum
	}
	return count, sum, buckets
}
