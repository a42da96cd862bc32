package app

import (
	"bufio"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// gcHeadroom is the heap goal the collector may use while the live heap
// is small. Go's default (GOGC=100) collects each time the heap doubles:
// with the gateway's small live heap and high allocation rate per call
// that is many collections. Up to this goal, memory is spent instead; past
// half of it the default applies. A larger goal saves collections but is
// memory the process holds at any load, beside the store's and the runs';
// a memory limit (memoryLimit) larger than four times it raises it to a
// quarter of the limit, up to maxGCHeadroom, where memory is known to be
// there.
const (
	gcHeadroom    = 96 << 20
	maxGCHeadroom = 512 << 20
)

// memoryLimitShare is the part of a container's memory limit the runtime's
// soft limit takes: the rest is for what the collector does not count
// (the bbolt file's mapped pages, the binary's) and for the kernel's
// accounting of the page cache.
const memoryLimitShare = 0.9

// memoryLimit is the soft memory limit and where it came from: the
// configuration's limits.memory_bytes, else GOMEMLIMIT (which the runtime
// applied at start), else a share of the container's limit (cgroup);
// 0 and "" for none.
func memoryLimit(configured int64, getenv func(string) string, cgroup func() int64) (int64, string) {
	switch {
	case configured > 0:
		return configured, "limits.memory_bytes"
	case getenv("GOMEMLIMIT") != "":
		if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
			return l, "GOMEMLIMIT"
		}
		return 0, ""
	}
	if c := cgroup(); c > 0 {
		return int64(float64(c) * memoryLimitShare), "cgroup memory.max"
	}
	return 0, ""
}

// headroomFor is the heap goal tuneGC keeps while the live heap is small,
// under a memory limit (0: none).
func headroomFor(limit int64) uint64 {
	if limit <= 0 || limit/4 <= gcHeadroom {
		return gcHeadroom
	}
	return uint64(min(limit/4, maxGCHeadroom))
}

// tuneGC sets the soft memory limit (memoryLimit) and keeps the
// collector's heap goal at max(headroom, 2 × live heap) — never above what
// the default would let the heap reach once the live heap passes half the
// headroom — by setting GOGC from the live heap every second. The runtime
// collects sooner when the process nears the memory limit, whatever GOGC
// says. A GOGC set by the operator turns the GOGC tuning off. It returns
// the limit and its source for the log.
func tuneGC(ctx context.Context, getenv func(string) string, configured int64) (int64, string) {
	limit, source := memoryLimit(configured, getenv, cgroupMemoryMax)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	if getenv("GOGC") != "" {
		return limit, source
	}
	headroom := headroomFor(limit)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := -1
	set := func() {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		if p := gcPercentFor(sample[0].Value.Uint64(), headroom); p != current {
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
	return limit, source
}

// gcPercentFor is the GOGC whose heap goal, live × (1 + GOGC/100), is
// headroom, kept between Go's default (100) and 400.
func gcPercentFor(live, headroom uint64) int {
	if live == 0 {
		return 400
	}
	p := int(100 * (float64(headroom)/float64(live) - 1))
	return min(max(p, 100), 400)
}

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupMemoryMax is the memory limit of the process's cgroup (0: none).
func cgroupMemoryMax() int64 {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	defer f.Close()
	return cgroupLimit(cgroupRoot, f)
}

// cgroupLimit reads the smallest memory limit set on the process's cgroup
// and its parents, under root, given /proc/self/cgroup: cgroup v2's
// memory.max ("max": none), or v1's memory.limit_in_bytes (a value near
// the largest int64: none). 0: none found. Inside a container, its own
// cgroup is usually the root of what it sees, so root's own file counts.
func cgroupLimit(root string, self io.Reader) int64 {
	var limit int64
	take := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		s := strings.TrimSpace(string(b))
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 { // "max", or v1's "no limit"
			return
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	walk := func(dir, rel, file string) {
		for p := filepath.Join(dir, rel); ; p = filepath.Dir(p) {
			take(filepath.Join(p, file))
			if p == dir || !strings.HasPrefix(p, dir) {
				return
			}
		}
	}
	sc := bufio.NewScanner(self)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			walk(root, parts[2], "memory.max")
		case hasController(parts[1], "memory"):
			walk(filepath.Join(root, "memory"), parts[2], "memory.limit_in_bytes")
		}
	}
	return limit
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
