package loopguard

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// tokenMasks and spaceMasks mark a block's bytes as the byte classes do:
// random blocks hold every byte value at every position many times over.
func TestTokenMasks(t *testing.T) {
	t.Parallel()
	if !hasTokenMasks {
		t.Skip("no AVX2 on this CPU: appendNormalized's byte loop runs alone (FuzzNormalizersMatchReference reads it)")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	b := make([]byte, 64)
	for n := range 20000 {
		for k := range b {
			b[k] = byte(rng.IntN(256))
		}
		alnum, escape, colon, dash, slash := tokenMasks(b)
		white, space, high := spaceMasks(b)
		for k, c := range b {
			want := [8]bool{byteClass[c] >= clLetter, byteClass[c] == clEscape, c == ':', c == '-', c == '/',
				isASCIISpace(c), c == ' ', c >= 0x80}
			for m, mask := range [8]uint64{alnum, escape, colon, dash, slash, white, space, high} {
				if got := mask>>k&1 == 1; got != want[m] {
					t.Fatalf("case %d: mask %d, byte %d (%#x): %v, want %v", n, m, k, c, got, want[m])
				}
			}
		}
	}
}

// appendNormalized writes what the byte-at-a-time reference writes —
// through its 64-byte steps on a CPU with AVX2 — for text dense in what
// it acts on: timestamps, clocks, UUIDs, dates with slashes, tokens of 2,
// 4 and 8 bytes before a follower that starts no match, long runs that
// are ids or words, escapes and characters of several bytes, at every
// alignment to the blocks and across their edges.
func TestNormalizeBlocks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	pieces := []string{
		"2024-05-01T12:00:00Z", "2024-05-01 12:00:00.123+02:00", "12:30:45", "09:15", "2024/05/01",
		"550e8400-e29b-41d4-a716-446655440000", "deadbeef-dead", "abcd-efgh", "ab:cd", "abcdefgh-",
		"4bf92f3577b34da6a3ce929d0e0e1234", "1714564800123", "20240501120000", "checkoutServiceHandler",
		"aB3dE5fG7hJ9kL1mN3pQ5rS7", "web-1", "ERROR", "x", "42", "latency_ms=251", "é", "世界",
		" ", " ", "-", ":", "/", "=", ".", ",", "\"", "\\", "\x01", "\x1f", "<ts>",
	}
	for n := range 30000 {
		var b strings.Builder
		for range rng.IntN(80) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := []byte(b.String())
		got, want := appendNormalized(nil, s), appendNormalizedRef(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendNormalized(%q)\n = %q\nwant %q", n, s, got, want)
		}
	}
}

// foldText writes what the byte-at-a-time reference writes — through its
// 64-byte steps on a CPU with AVX2 — for text whose white space comes one
// byte at a time (the blocks written whole, each white space byte as a
// space) or in runs, at the start and the end, beside characters beyond
// ASCII, invalid bytes and control bytes, across the blocks' edges.
func TestFoldBlocks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 14))
	pieces := []string{
		"word", "checkout", "ERROR", "x", "2024-05-01T12:00:00Z", "a,b.c;d", "\x01", "\x7f",
		" ", " ", " ", "\n", "\t", "\r\n", "  ", " \n ", "\v\f", "é", "世界", "\u2003", "\u00a0", "\xff", "\xc3(",
	}
	for n := range 30000 {
		var b strings.Builder
		for range rng.IntN(90) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := []byte(b.String())
		for _, prefix := range [][]byte{nil, []byte("kept")} {
			got, want := foldText(prefix, s), foldTextRef(prefix, s)
			if !bytes.Equal(got, want) {
				t.Fatalf("case %d: foldText(%q, %q)\n = %q\nwant %q", n, prefix, s, got, want)
			}
		}
	}
}
