package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// gcPauseMetric is the gateway's histogram of the collector's
// stop-the-world pauses (telemetry.RegisterGCPauses), named here, not
// imported, so that the harness stays black-box.
const gcPauseMetric = "haltline_gc_pause_seconds"

// gcPauses is a phase's share of a gateway's GC pause histogram: the
// difference of its buckets between the start and the end of each turn.
type gcPauses struct {
	Count uint64 `json:"count"`
	// MaxUs is the upper bound of the highest bucket a pause of the phase
	// fell in: the longest pause was at most this; Longer says one was
	// longer than the largest bound.
	MaxUs  float64 `json:"max_us"`
	Longer bool    `json:"longer_than_max_bucket,omitempty"`
	// Buckets counts the phase's pauses by the bucket's upper bound in
	// seconds (not cumulative).
	Buckets map[string]uint64 `json:"buckets"`
}

// add adds the pauses between two scrapes of the cumulative histogram.
func (g *gcPauses) add(before, after map[float64]uint64) {
	bounds := make([]float64, 0, len(after))
	for le := range after {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	var prev uint64 // the previous bound's count in this turn
	for _, le := range bounds {
		cum := after[le] - before[le]
		n := cum - min(prev, cum)
		prev = cum
		if n == 0 {
			continue
		}
		if g.Buckets == nil {
			g.Buckets = map[string]uint64{}
		}
		g.Buckets[strconv.FormatFloat(le, 'g', -1, 64)] += n
		g.Count += n
		if math.IsInf(le, 1) {
			g.Longer = true
			continue
		}
		g.MaxUs = max(g.MaxUs, le*1e6)
	}
}

// longest is MaxUs, or +Inf when a pause was longer than every bound.
func (g *gcPauses) longest() float64 {
	if g.Longer {
		return math.Inf(1)
	}
	return g.MaxUs
}

// merge adds another phase's (or level's) pauses.
func (g *gcPauses) merge(o *gcPauses) *gcPauses {
	if o == nil {
		return g
	}
	if g == nil {
		g = &gcPauses{}
	}
	for k, v := range o.Buckets {
		if g.Buckets == nil {
			g.Buckets = map[string]uint64{}
		}
		g.Buckets[k] += v
	}
	g.Count += o.Count
	g.MaxUs = max(g.MaxUs, o.MaxUs)
	g.Longer = g.Longer || o.Longer
	return g
}

// scrapeGCPauses reads the cumulative GC pause histogram from a gateway's
// metrics endpoint, by upper bound.
func scrapeGCPauses(ctx context.Context, c *http.Client, admin string) (map[float64]uint64, error) {
	b, err := fetchMetrics(ctx, c, admin)
	if err != nil {
		return nil, err
	}
	return parseHistogram(bufio.NewScanner(bytes.NewReader(b)), gcPauseMetric)
}

// fetchMetrics reads a gateway's /metrics (Prometheus's text format).
func fetchMetrics(ctx context.Context, c *http.Client, admin string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// parseHistogram reads the buckets of a histogram without labels of its
// own from Prometheus's text format: name_bucket{le="0.001"} 12.
func parseHistogram(sc *bufio.Scanner, name string) (map[float64]uint64, error) {
	out := map[float64]uint64{}
	prefix := name + `_bucket{le="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: bound %q", name, le)
		}
		n, err := strconv.ParseFloat(strings.Fields(count)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: count %q", name, count)
		}
		out[bound] = uint64(n)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in the metrics", name)
	}
	return out, nil
}

// resetPeakRSS makes the process's VmHWM its current RSS (clear_refs 5),
// so that the next reading is the peak since. It returns the peak until
// then (KiB).
func resetPeakRSS(pid int) int64 {
	peak := peakRSS(pid)
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	return peak
}

// turnProbe measures a target's processes over one turn: their peak RSS
// and a gateway's GC pauses. A zero probe (the direct target) measures
// nothing.
type turnProbe struct {
	t      *target
	c      *http.Client
	before []map[float64]uint64 // by process, gateways only
}

// startTurn resets the peak RSS of the target's processes (keeping the
// round's peaks on the target) and reads a gateway's GC pauses so far.
func startTurn(ctx context.Context, c *http.Client, t *target) turnProbe {
	procs := t.procs()
	if len(procs) == 0 {
		return turnProbe{}
	}
	if len(t.peakKB) < len(procs) {
		t.peakKB = make([]int64, len(procs))
	}
	p := turnProbe{t: t, c: c}
	for k, pr := range procs {
		t.peakKB[k] = max(t.peakKB[k], resetPeakRSS(pr.pid()))
		if t.gateway {
			before, _ := scrapeGCPauses(ctx, c, pr.admin)
			p.before = append(p.before, before)
		}
	}
	return p
}

// end returns the turn's peak RSS (KiB) of the process that peaked
// highest (RSS is reported per process) and adds every process's GC
// pauses to gc.
func (p turnProbe) end(ctx context.Context, gc **gcPauses) int64 {
	if p.t == nil {
		return 0
	}
	var peak int64
	for k, pr := range p.t.procs() {
		peak = max(peak, peakRSS(pr.pid()))
		if k >= len(p.before) || p.before[k] == nil {
			continue
		}
		if after, err := scrapeGCPauses(ctx, p.c, pr.admin); err == nil {
			if *gc == nil {
				*gc = &gcPauses{}
			}
			(*gc).add(p.before[k], after)
		}
	}
	return peak
}
