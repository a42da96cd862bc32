package loopguard

import (
	"fmt"
	"testing"
)

func TestSketchSimilar(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	sk := func(agent, tool, args string) Sketch { return c.Sketch(agent, tool, []byte(args)) }
	tests := []struct {
		desc    string
		a, b    Sketch
		similar bool
	}{
		{"reordered words", sk("a", "s", `{"q":"acme corp q3 revenue"}`), sk("a", "s", `{"q":"q3 revenue acme corp"}`), true},
		{"case, stop words and inflection", sk("a", "s", `{"q":"Rotate the API key"}`), sk("a", "s", `{"q":"rotation of api key"}`), true},
		{"keys do not count", sk("a", "s", `{"query":"kafka lag","filter":"eu"}`), sk("a", "s", `{"query":"vault lease","filter":"us"}`), false},
		{"volatile values do not count", sk("a", "s", `{"q":"ping 2024-05-01T12:00:00Z"}`), sk("a", "s", `{"q":"ping 1714564800"}`), true},
		{"text arguments", sk("a", "sh", `grep -rn timeout ./svc`), sk("a", "sh", `grep -rn "timeout" ./svc/`), true},
		{"other question", sk("a", "s", `{"q":"vault lease renew"}`), sk("a", "s", `{"q":"secrets manager"}`), false},
		{"other tool", sk("a", "s", `{"q":"kafka lag"}`), sk("a", "t", `{"q":"kafka lag"}`), false},
		{"other agent", sk("a", "s", `{"q":"kafka lag"}`), sk("b", "s", `{"q":"kafka lag"}`), false},
		{"agent/tool boundary", sk("ab", "c", `{"q":"kafka lag"}`), sk("a", "bc", `{"q":"kafka lag"}`), false},
		{"no words", sk("a", "s", `{"q":"<ts>","n":1}`), sk("a", "s", `{"q":"<ts>","n":1}`), false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.a.Similar(&tc.b, DefaultSemanticSimilarity); got != tc.similar {
				t.Errorf("Similar = %v, want %v", got, tc.similar)
			}
		})
	}
	if z := sk("a", "s", `{}`); !z.IsZero() || z.Similar(&z, 0.01) {
		t.Error("a sketch without words is not zero, or similar to itself")
	}
}

// TestSketchEstimate checks the estimate against the exact Jaccard
// similarity of word sets built to overlap by a known amount.
func TestSketchEstimate(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	for _, shared := range []int{20, 60, 100} {
		var a, b []byte
		a = append(a, '"')
		b = append(b, '"')
		for i := range 100 {
			w := fmt.Sprintf("w%d,", i) // commas: unigrams only
			a = append(a, w...)
			if i < shared {
				b = append(b, w...)
			} else {
				b = append(b, fmt.Sprintf("x%d,", i)...)
			}
		}
		a, b = append(a, '"'), append(b, '"')
		x, y := c.Sketch("a", "t", a), c.Sketch("a", "t", b)
		j := float64(shared) / float64(200-shared)
		if !x.Similar(&y, max(j-0.2, 0.01)) || (j < 0.8 && x.Similar(&y, j+0.2)) {
			t.Errorf("%d shared words (Jaccard %.2f): estimate outside ±0.2", shared, j)
		}
	}
}

func BenchmarkSketch1KB(b *testing.B) {
	c := NewCanonicalizer(nil)
	args := args1KB(1)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		c.Sketch("agent-1", "query_logs", args)
	}
}

// BenchmarkSketchCanonical1KB is what CallPrints adds to Fingerprints: the
// sketch of canonical arguments already at hand.
func BenchmarkSketchCanonical1KB(b *testing.B) {
	c := NewCanonicalizer(nil)
	canon := c.Canonical(nil, args1KB(1))
	b.SetBytes(int64(len(canon)))
	b.ReportAllocs()
	for b.Loop() {
		sketchOf("agent-1", "query_logs", canon)
	}
}
