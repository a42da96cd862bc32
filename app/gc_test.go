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
