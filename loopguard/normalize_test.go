package loopguard

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// appendNormalized, which copies in bulk what needs no change, writes what
// the byte-at-a-time reference writes for text dense in what it acts on:
// timestamps, clocks, UUIDs, dates with slashes, tokens of 2, 4 and 8
// bytes before a follower that starts no match, long runs that are ids or
// words, escapes and characters of several bytes.
func TestNormalizeDenseText(t *testing.T) {
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

// foldText, which copies runs of ASCII in bulk, writes what the
// byte-at-a-time reference writes for text whose white space comes one
// byte at a time or in runs, at the start and the end, beside characters
// beyond ASCII, invalid bytes and control bytes.
func TestFoldDenseText(t *testing.T) {
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
