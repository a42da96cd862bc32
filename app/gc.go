package app

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcHeadroom is the heap the collector may use above the live heap before
// it runs, while the live heap is small. Go's default (GOGC=100) collects
// each time the heap doubles: with the gateway's small live heap and high
// allocation rate per call that is many collections (10 % of its CPU at
// saturation). Up to this headroom, memory is spent instead.
const gcHeadroom = 512 << 20

// tuneGC keeps the collector's heap goal at max(gcHeadroom, 2 × live heap)
// — never above what the default would let the heap reach once the live
// heap passes gcHeadroom/2 — by setting GOGC from the live heap every
// second. A GOGC or GOMEMLIMIT set by the operator turns it off.
func tuneGC(ctx context.Context, getenv func(string) string) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := -1
	set := func() {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		if p := gcPercentFor(sample[0].Value.Uint64()); p != current {
			debug.SetGCPercent(p)
			current = p
		}
	}
	set()
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				set()
			}
		}
	}()
}

// gcPercentFor is the GOGC whose heap goal, live × (1 + GOGC/100), is
// gcHeadroom, kept between Go's default (100) and 400.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return 400
	}
	p := int(100 * (float64(gcHeadroom)/float64(live) - 1))
	return min(max(p, 100), 400)
}
