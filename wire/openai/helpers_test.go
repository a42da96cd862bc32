package openai

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/sse"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feedCuts runs stream through tap in pieces cut at the given offsets and
// returns everything the tap let through. Each Feed result is copied at
// once: it is only valid until the next call.
func feedCuts(tap wire.StreamTap, stream []byte, cuts []int) []byte {
	var out []byte
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		if c < prev || c > len(stream) {
			continue
		}
		// A fresh copy per piece, as a transport hands out its own buffers.
		piece := append([]byte(nil), stream[prev:c]...)
		out = append(out, tap.Feed(piece)...)
		prev = c
	}
	return append(out, tap.End()...)
}

// randomCuts returns sorted offsets cutting n bytes into pieces of 1..max.
func randomCuts(r *rand.Rand, n, maxPiece int) []int {
	var cuts []int
	for c := r.IntN(maxPiece) + 1; c < n; c += r.IntN(maxPiece) + 1 {
		cuts = append(cuts, c)
	}
	return cuts
}

// withoutUsageEvents is the reference for the strip: the stream split whole,
// minus every usage-only event.
func withoutUsageEvents(stream []byte) []byte {
	var s sse.Splitter
	var out []byte
	probe := &chatTap{strip: true}
	keep := func(ev []byte) {
		if !probe.read(ev) {
			out = append(out, ev...)
		}
	}
	s.Feed(stream, keep)
	if p := s.Pending(); len(p) > 0 {
		keep(append([]byte(nil), p...))
	}
	return out
}

func eventsOf(stream []byte) [][]byte {
	var s sse.Splitter
	var evs [][]byte
	s.Feed(stream, func(ev []byte) { evs = append(evs, bytes.Clone(ev)) })
	return evs
}
