package app

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// The heap goal is the headroom while the live heap is small, and twice the
// live heap (Go's default) once it passes half the headroom.
func TestGCPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 512 << 20, 400}, {50 << 20, 512 << 20, 400}, {102 << 20, 512 << 20, 400}, {128 << 20, 512 << 20, 300}, {256 << 20, 512 << 20, 100}, {4 << 30, 512 << 20, 100},
		{12 << 20, 96 << 20, 400}, {32 << 20, 96 << 20, 200}, {48 << 20, 96 << 20, 100}, {200 << 20, 96 << 20, 100},
	} {
		if got := gcPercentFor(tc.live, tc.headroom); got != tc.want {
			t.Errorf("live %d MiB, headroom %d MiB: GOGC %d, want %d", tc.live>>20, tc.headroom>>20, got, tc.want)
		}
	}
}

// A memory limit well above the default headroom raises it to a quarter
// of the limit, up to maxGCHeadroom; none, or a small one, leaves it.
func TestHeadroomFor(t *testing.T) {
	for _, tc := range []struct {
		limit int64
		want  uint64
	}{
		{0, gcHeadroom}, {256 << 20, gcHeadroom}, {1 << 30, 256 << 20}, {16 << 30, maxGCHeadroom},
	} {
		if got := headroomFor(tc.limit); got != tc.want {
			t.Errorf("limit %d MiB: headroom %d MiB, want %d", tc.limit>>20, got>>20, tc.want>>20)
		}
	}
}

// The configuration's limit wins, then GOMEMLIMIT, then the share of the
// container's.
func TestMemoryLimit(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cg := func(v int64) func() int64 { return func() int64 { return v } }
	if l, src := memoryLimit(300<<20, env(map[string]string{"GOMEMLIMIT": "1GiB"}), cg(1<<30)); l != 300<<20 || src != "limits.memory_bytes" {
		t.Errorf("configured: %d from %q", l, src)
	}
	if l, src := memoryLimit(0, env(nil), cg(1000<<20)); l != 900<<20 || src != "cgroup memory.max" {
		t.Errorf("cgroup: %d from %q", l, src)
	}
	if l, src := memoryLimit(0, env(nil), cg(0)); l != 0 || src != "" {
		t.Errorf("none: %d from %q", l, src)
	}
	// The runtime reads GOMEMLIMIT at start; set as it would have.
	prev := debug.SetMemoryLimit(700 << 20)
	defer debug.SetMemoryLimit(prev)
	if l, src := memoryLimit(0, env(map[string]string{"GOMEMLIMIT": "700MiB"}), cg(1<<30)); l != 700<<20 || src != "GOMEMLIMIT" {
		t.Errorf("GOMEMLIMIT: %d from %q", l, src)
	}
}

// The smallest limit of the process's cgroup and its parents, v2 or v1;
// "max" and v1's huge "no limit" are none.
func TestCgroupLimit(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.max", "max")
	write("kubepods/memory.max", "1073741824")
	write("kubepods/pod1/memory.max", "max")
	write("kubepods/pod1/gw/memory.max", "2147483648")
	if got := cgroupLimit(root, strings.NewReader("0::/kubepods/pod1/gw\n")); got != 1<<30 {
		t.Errorf("v2: %d", got)
	}
	if got := cgroupLimit(root, strings.NewReader("0::/\n")); got != 0 {
		t.Errorf("v2 without a limit: %d", got)
	}
	write("memory/memory.limit_in_bytes", "9223372036854771712")
	write("memory/docker/abc/memory.limit_in_bytes", "536870912")
	if got := cgroupLimit(root, strings.NewReader("12:cpu,cpuacct:/docker/abc\n5:memory:/docker/abc\n")); got != 512<<20 {
		t.Errorf("v1: %d", got)
	}
	if got := cgroupLimit(filepath.Join(root, "none"), strings.NewReader("0::/\n")); got != 0 {
		t.Errorf("no cgroup files: %d", got)
	}
}

func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		env           string
		cpus, current int
		want          int
	}{
		{"", 1, 1, 2},  // pinned to one CPU, or a one-CPU machine
		{"1", 1, 1, 0}, // the operator's choice
		{"", 2, 1, 0},  // a CPU quota of one: two threads would be throttled
		{"", 4, 4, 0},  // several CPUs
		{"", 1, 3, 0},  // set by the program already
	} {
		if got := procsFor(c.env, c.cpus, c.current); got != c.want {
			t.Errorf("procsFor(%q, %d, %d) = %d, want %d", c.env, c.cpus, c.current, got, c.want)
		}
	}
}
