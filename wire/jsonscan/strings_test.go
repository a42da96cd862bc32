package jsonscan

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// validDense ends every string where its word loops alone end it and where
// the byte-at-a-time reference does, and skipDense where its word loops
// do (and where validDense does, for a valid string): escapes of every
// kind and runs of backslashes straddle the blocks' edges, long plain
// runs make blocks with nothing to mark (after an odd backslash run too),
// and one string in eight has an error or no end.
func TestDenseBlocks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	plain := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 8)
	common := []string{`\"`, `\\`, `\n`, `\/`, `\u00e9`, `\\\"`, `\\\\\\`, "x", "{", " "}
	rare := []string{`"`, `\q`, "\x01", "\x1f", `\u12`, `\`, `\u00g0`}
	for n := range 30000 {
		var b strings.Builder
		for range rng.IntN(60) {
			switch r := rng.IntN(10); {
			case r < 2:
				b.WriteString(plain[:rng.IntN(len(plain))])
			case r == 2 && rng.IntN(8) == 0:
				b.WriteString(rare[rng.IntN(len(rare))])
			default:
				b.WriteString(common[rng.IntN(len(common))])
			}
		}
		if rng.IntN(8) != 0 {
			b.WriteString(`", "tail"`)
		}
		body := b.String()
		want := refString(`"`+body, 0)
		if want > 0 {
			want-- // an index of body
		}
		if got := validDenseWords(body, 0, 0); got != want {
			t.Fatalf("case %d: validDenseWords(%q) = %d, want %d", n, body, got, want)
		}
		if got := validDense(body, 0); got != want {
			t.Fatalf("case %d: validDense(%q) = %d, want %d", n, body, got, want)
		}
		skip := skipDenseWords(body, 0, 0)
		if got := skipDense(body, 0); got != skip {
			t.Fatalf("case %d: skipDense(%q) = %d, its word loops %d", n, body, got, skip)
		}
		if want > 0 && skip != want {
			t.Fatalf("case %d: skipDense(%q) = %d, want %d", n, body, skip, want)
		}
	}
}

// A string with few escapes, read by searches in turn, ends where the
// byte-at-a-time reference ends it: long plain runs with an escape, a
// control byte or the closing quote at any position of the blocks and of
// the words after them.
func TestSparseStrings(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	plain := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	marks := []string{`\"`, `\\`, `\n`, `\u00e9`, `\/`, "\x01", `\q`, `\u12`, `\`}
	for n := range 20000 {
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(6) {
			b.WriteString(plain[:rng.IntN(len(plain))])
			if rng.IntN(3) != 0 {
				k := rng.IntN(5)
				if rng.IntN(10) == 0 {
					k = rng.IntN(len(marks))
				}
				b.WriteString(marks[k])
			}
		}
		if rng.IntN(8) != 0 {
			b.WriteString(`", "tail"`)
		}
		s := b.String()
		want := refString(s, 0)
		if got := validSparse(s, 1); got != want {
			t.Fatalf("case %d: validSparse(%q) = %d, want %d", n, s, got, want)
		}
		if got := ValidString(s, 0); got != want {
			t.Fatalf("case %d: ValidString(%q) = %d, want %d", n, s, got, want)
		}
	}
}
