package loopguard

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// semanticRun feeds a guard one call a step with the given queries and
// results and returns the steps at which each detector reported.
func semanticRun(t *testing.T, g *Guard, c *Canonicalizer, queries, results []string, perStep int) map[string][]int {
	t.Helper()
	got := map[string][]int{}
	note := func(v *Verdict) {
		if v != nil {
			got[v.Detector] = append(got[v.Detector], v.Step)
		}
	}
	for i := 0; i < len(queries); i += perStep {
		var calls []Call
		for j := i; j < i+perStep && j < len(queries); j++ {
			args := []byte(fmt.Sprintf(`{"q":%q}`, queries[j]))
			calls = append(calls, Call{ID: fmt.Sprint("c", j), Tool: "search",
				FP: c.Fingerprint("a", "search", args), Sketch: c.Sketch("a", "search", args)})
		}
		note(g.Step(i+1, calls))
		for j := range calls {
			note(g.Observe(calls[j].ID, c.Observation([]byte(results[i+j]))))
		}
	}
	return got
}

func TestSemanticDetector(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	rephrased := []string{"acme corp q3 revenue", "q3 revenue acme corp", "revenue of acme corp q3", "acme corp revenue q3", "acme q3 corp revenue"}
	same := []string{"no results", "no results", "no results", "no results", "no results"}
	moving := []string{"1 result", "2 results", "3 results", "4 results", "5 results"}

	got := semanticRun(t, NewGuard(DefaultThresholds()), c, rephrased, same, 1)
	// The first "no results" is new; the three calls after it are not
	// separated by anything new, so the fourth step completes the loop.
	if fmt.Sprint(got) != "map[semantic:[4]]" {
		t.Errorf("rephrased search, same answer: %v, want semantic at step 4 only", got)
	}
	if got := semanticRun(t, NewGuard(DefaultThresholds()), c, rephrased, moving, 1); len(got) != 0 {
		t.Errorf("rephrased search, new answers: %v, want nothing", got)
	}
	// Calls of one step are decided together: a fan-out is not a repeat.
	if got := semanticRun(t, NewGuard(DefaultThresholds()), c, rephrased[:3], same[:3], 3); len(got) != 0 {
		t.Errorf("parallel calls of one step: %v, want nothing", got)
	}
	off := DefaultThresholds()
	off.SemanticRepeats = 0
	if got := semanticRun(t, NewGuard(off), c, rephrased, same, 1); len(got) != 0 {
		t.Errorf("detector off: %v", got)
	}
}

// TestSemanticLeavesOtherEvidence: a semantic verdict consumes only its own
// evidence, so the stall it comes before is still reported at its step.
func TestSemanticLeavesOtherEvidence(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	// The same question with a creeping number: one shape, one answer.
	var qs, rs []string
	for i := range 4 {
		qs = append(qs, fmt.Sprintf("errors in checkout service offset %d", 100+i))
		rs = append(rs, "no data")
	}
	got := semanticRun(t, NewGuard(DefaultThresholds()), c, qs, rs, 1)
	if fmt.Sprint(got) != "map[semantic:[4] stall:[4]]" {
		t.Errorf("got %v, want semantic and stall at step 4", got)
	}
}

func TestSemanticStateRestored(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	qs := []string{"acme corp q3 revenue", "q3 revenue acme corp", "revenue of acme corp q3", "acme corp revenue q3"}
	g := NewGuard(DefaultThresholds())
	semanticRun(t, g, c, qs[:3], []string{"none", "none", "none"}, 1)
	state, err := g.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	g2 := NewGuard(DefaultThresholds())
	if err := g2.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	args := []byte(fmt.Sprintf(`{"q":%q}`, qs[3]))
	v := g2.Step(4, []Call{{ID: "c3", Tool: "search", FP: c.Fingerprint("a", "search", args), Sketch: c.Sketch("a", "search", args)}})
	if v == nil || v.Detector != DetectorSemantic {
		t.Fatalf("after a restore: %+v, want a semantic verdict", v)
	}

	// A version 1 state (no semantic part) is still read; its run starts
	// the semantic detector afresh.
	v1 := []byte("LGv1")
	for _, x := range []uint64{1, 1, 0, 1, 0} { // seq epoch mark nsteps; step seq
		v1 = binary.AppendUvarint(v1, x)
	}
	v1 = binary.AppendVarint(v1, 1) // step
	v1 = append(v1, 0, 1, 1)        // epoch, flags (new observation), ncalls
	v1 = binary.LittleEndian.AppendUint64(v1, hashID("x"))
	v1 = append(v1, make([]byte, 24)...) // fingerprint
	v1 = append(v1, 1, 1)                // observed; one seen key
	v1 = append(v1, make([]byte, 16)...)
	g3 := NewGuard(DefaultThresholds())
	if err := g3.UnmarshalBinary(v1); err != nil {
		t.Fatalf("version 1 state: %v", err)
	}
	if g3.n != 1 || !g3.at(0).calls[0].observed || g3.epoch != 1 || g3.seen.len() != 1 {
		t.Errorf("version 1 state restored as %d steps, epoch %d", g3.n, g3.epoch)
	}
}
