package app

import "testing"

// The heap goal is 512 MiB while the live heap is small, and twice the live
// heap (Go's default) once it passes 256 MiB.
func TestGCPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 400}, {50 << 20, 400}, {102 << 20, 400}, {128 << 20, 300}, {256 << 20, 100}, {4 << 30, 100},
	} {
		if got := gcPercentFor(tc.live); got != tc.want {
			t.Errorf("live %d MiB: GOGC %d, want %d", tc.live>>20, got, tc.want)
		}
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
