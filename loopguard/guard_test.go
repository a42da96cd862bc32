package loopguard

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func fpOf(b byte) Fingerprint { return Fingerprint{b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b} }

func obsOf(b byte) Fingerprint { return Fingerprint{0xEE, b} }

func TestFingerprintParts(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	tests := []struct {
		desc              string
		a, b              [3]string // agent, tool, args
		sameID, sameShape bool
	}{
		{"volatile suffix", [3]string{"a", "q", `{"q":"x 2024-05-01T12:00:00Z"}`}, [3]string{"a", "q", `{"q":"x 2024-05-01T12:00:09Z"}`}, true, true},
		{"numeric creep", [3]string{"a", "q", `{"offset":100}`}, [3]string{"a", "q", `{"offset":101}`}, false, true},
		{"other string", [3]string{"a", "w", `{"path":"a.go"}`}, [3]string{"a", "w", `{"path":"b.go"}`}, false, false},
		{"other agent", [3]string{"a", "q", `{}`}, [3]string{"b", "q", `{}`}, false, false},
		{"agent/tool boundary", [3]string{"ab", "c", `{}`}, [3]string{"a", "bc", `{}`}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			x := c.Fingerprint(tc.a[0], tc.a[1], []byte(tc.a[2]))
			y := c.Fingerprint(tc.b[0], tc.b[1], []byte(tc.b[2]))
			if (x == y) != tc.sameID || (x.shape() == y.shape()) != tc.sameShape {
				t.Errorf("same identity %v (want %v), same shape %v (want %v)", x == y, tc.sameID, x.shape() == y.shape(), tc.sameShape)
			}
		})
	}
	if c.Observation([]byte("no data\n")) != c.Observation([]byte("  no   data")) {
		t.Error("observations differing in white space hash differently")
	}
	if c.Observation([]byte("[]")) == c.Observation([]byte("no data")) {
		t.Error("different observations hash the same")
	}
	if len(fpOf(1).String()) != 16 {
		t.Errorf("String() = %q, want 16 hex digits", fpOf(1).String())
	}
}

func TestGuard(t *testing.T) {
	t.Parallel()
	type op struct {
		step  int      // > 0: Step(step, calls)
		calls []string // "id:fp" pairs as id and fingerprint byte
		obs   string   // Observe(obs, obsOf(val))
		val   byte
	}
	S := func(step int, calls ...string) op { return op{step: step, calls: calls} }
	O := func(id string, val byte) op { return op{obs: id, val: val} }
	tests := []struct {
		desc     string
		th       Thresholds
		ops      []op
		detector string // "" means no verdict at all
		atOp     int    // index of the op expected to report
	}{
		{desc: "same in row needs no new observation in between",
			ops:      []op{S(1, "a1:1"), O("a1", 1), S(2, "a2:1"), O("a2", 1), S(3, "a3:1"), O("a3", 1), S(4, "a4:1")},
			detector: DetectorSameInRow, atOp: 6},
		{desc: "changing result is progress",
			ops: []op{S(1, "a1:1"), O("a1", 1), S(2, "a2:1"), O("a2", 2), S(3, "a3:1"), O("a3", 3), S(4, "a4:1"), O("a4", 4), S(5, "a5:1")}},
		{desc: "late results: the stall waits for the step to complete",
			th:       Thresholds{StallSteps: 3},
			ops:      []op{S(1, "a:1"), O("a", 1), S(2, "b:1"), S(3, "c:1"), O("c", 1), S(4, "d:1"), O("d", 1), O("b", 1)},
			detector: DetectorStall, atOp: 7},
		{desc: "an older step without its result ends the stall count",
			th:  Thresholds{StallSteps: 3},
			ops: []op{S(1, "a:1"), O("a", 1), S(2, "b:1"), S(3, "c:1"), O("c", 1), S(4, "d:1"), O("d", 1)}},
		{desc: "the same result after a different call shape is new",
			th:  Thresholds{StallSteps: 2},
			ops: []op{S(1, "a:1"), O("a", 1), S(2, "b:2"), O("b", 1), S(3, "c:3"), O("c", 1)}},
		{desc: "reused call ids match the newest pending call",
			th:       Thresholds{StallSteps: 2},
			ops:      []op{S(1, "call_0:1"), O("call_0", 1), S(2, "call_0:1"), O("call_0", 1), S(3, "call_0:1"), O("call_0", 1)},
			detector: DetectorStall, atOp: 5},
		{desc: "text-only decisions are neutral",
			ops:      []op{S(1, "a:1"), S(2), S(3, "b:1"), S(4), S(5, "c:1")},
			detector: DetectorSameInRow, atOp: 4},
		{desc: "parallel duplicates in one step count once",
			ops: []op{S(1, "a:1", "b:1", "c:1"), S(2, "d:2")}},
		{desc: "cycle of period 3",
			th:  Thresholds{MaxCyclePeriod: 3},
			ops: []op{S(1, "a:1"), S(2, "b:2"), S(3, "c:3"), S(4, "d:1"), S(5, "e:2"), S(6, "f:3")}, detector: DetectorCycle, atOp: 5},
		{desc: "detectors off",
			th:  Thresholds{},
			ops: []op{S(1, "a:1"), S(2, "b:1"), S(3, "c:1"), S(4, "d:1"), S(5, "e:1")}},
		{desc: "an unknown result id still counts as new",
			ops: []op{S(1, "a:1"), O("a", 1), S(2, "b:1"), O("zz", 9), S(3, "c:1"), O("zz", 8), S(4, "d:1")}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			th := tc.th
			if th == (Thresholds{}) && tc.desc != "detectors off" {
				th = DefaultThresholds()
			}
			g := NewGuard(th)
			gotAt, got := -1, ""
			for i, o := range tc.ops {
				var v *Verdict
				if o.obs != "" {
					v = g.Observe(o.obs, obsOf(o.val))
				} else {
					calls := make([]Call, len(o.calls))
					for j, s := range o.calls {
						id, num, _ := strings.Cut(s, ":")
						b, err := strconv.Atoi(num)
						if err != nil {
							t.Fatal(err)
						}
						calls[j] = Call{ID: id, Tool: "tool", FP: fpOf(byte(b))}
					}
					v = g.Step(o.step, calls)
				}
				if v != nil && gotAt < 0 {
					gotAt, got = i, v.Detector
				}
			}
			if got != tc.detector || (got != "" && gotAt != tc.atOp) {
				t.Errorf("got %q at op %d, want %q at op %d", got, gotAt, tc.detector, tc.atOp)
			}
		})
	}
}

func TestVerdictConsumesEvidence(t *testing.T) {
	t.Parallel()
	g := NewGuard(DefaultThresholds())
	var at []int
	for i := 1; i <= 12; i++ {
		if v := g.Step(i, []Call{{ID: fmt.Sprint(i), FP: fpOf(1)}}); v != nil {
			at = append(at, v.Step)
			if v.Reason != ReasonLoop || len(v.Fingerprints) != 1 || v.Detail == "" {
				t.Errorf("bad verdict %+v", v)
			}
		}
	}
	// Shadow mode keeps the run going: one report per full threshold.
	if fmt.Sprint(at) != "[3 6 9 12]" {
		t.Errorf("verdicts at steps %v, want [3 6 9 12]", at)
	}
}

func TestStateBoundedAndRestored(t *testing.T) {
	t.Parallel()
	g := NewGuard(LongTaskThresholds())
	for i := 0; i < 10000; i++ {
		calls := make([]Call, 40) // more than MaxCallsPerStep
		for j := range calls {
			calls[j] = Call{ID: fmt.Sprint(i, "-", j), FP: Fingerprint{byte(i), byte(i >> 8), byte(j)}, Sketch: Sketch{key: 1, mins: [SketchBuckets]uint32{uint32(i)}}}
		}
		g.Step(i, calls)
		for j := range calls {
			g.Observe(calls[j].ID, Fingerprint{byte(i), byte(i >> 8), byte(j), 7})
		}
	}
	state, err := g.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if g.seen.len() != MaxSeenObservations || len(state) > 150<<10 {
		t.Errorf("state: %d observations, %d bytes", g.seen.len(), len(state))
	}
	// A guard with smaller thresholds keeps the newest steps that fit.
	small := NewGuard(DefaultThresholds())
	if err := small.UnmarshalBinary(state); err != nil {
		t.Fatal(err)
	}
	if small.n != len(small.ring) || small.at(small.n-1).step != 9999 || small.Thresholds() != DefaultThresholds() {
		t.Errorf("restored %d steps, newest %d", small.n, small.at(small.n-1).step)
	}
	for _, bad := range [][]byte{nil, []byte("LGv1"), append([]byte("LGv1"), 0xff), state[:len(state)-1], append(append([]byte{}, state...), 0)} {
		if err := small.UnmarshalBinary(bad); err == nil {
			t.Errorf("UnmarshalBinary(%d bytes) accepted a bad state", len(bad))
		}
	}
	if small.at(small.n-1).step != 9999 {
		t.Error("a failed UnmarshalBinary changed the guard")
	}
}
