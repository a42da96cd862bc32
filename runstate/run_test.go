package runstate

import (
	"regexp"
	"slices"
	"testing"
	"time"
)

// Run ids sort by the second they were made (the embedded store keeps a
// run's keys together with those of runs made at the same time) and never
// repeat within one.
func TestNewRunIDSortsByCreation(t *testing.T) {
	format := regexp.MustCompile(`^r-[0-9a-f]{26}$`)
	base := time.Date(2026, 12, 1, 23, 59, 59, 0, time.UTC)
	seen := map[string]bool{}
	prevMax := ""
	for s := range 3 {
		second := base.Add(time.Duration(s) * time.Second)
		ids := make([]string, 0, 1000)
		for i := range 1000 {
			id := NewRunID(second.Add(time.Duration(i) * time.Millisecond))
			if !format.MatchString(id) {
				t.Fatalf("id %q: want r- and 26 hex digits", id)
			}
			if seen[id] {
				t.Fatalf("id %q made twice", id)
			}
			seen[id] = true
			ids = append(ids, id)
		}
		if lo := slices.Min(ids); lo <= prevMax {
			t.Fatalf("id %q of second %d sorts before %q of the second before", lo, s, prevMax)
		}
		prevMax = slices.Max(ids)
	}
}
