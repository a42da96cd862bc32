package loopguard

// Thresholds configure the detectors. A detector whose threshold is zero or
// negative is off. Values come from policy (docs/design.md §8); NewGuard clamps them
// to sane bounds so a policy typo cannot make a run's state unbounded.
type Thresholds struct {
	// SameInRow: the same fingerprint in this many consecutive steps.
	SameInRow int
	// Window and WindowRepeats: one fingerprint in WindowRepeats of the last
	// Window steps.
	Window, WindowRepeats int
	// MaxCyclePeriod: the longest cycle looked for (A B A B is period 2).
	MaxCyclePeriod int
	// StallSteps: this many consecutive steps that observe nothing new.
	StallSteps int
	// SemanticRepeats, SemanticWindow and SemanticSimilarity: calls of one
	// agent's tool in SemanticRepeats of the last SemanticWindow steps whose
	// argument words are pairwise similar at SemanticSimilarity or more (an
	// estimated Jaccard similarity in (0, 1]), with no result new in itself
	// observed in between.
	SemanticRepeats, SemanticWindow int
	SemanticSimilarity              float64
}

// DefaultThresholds returns the docs/design.md §8 defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{SameInRow: 3, Window: 6, WindowRepeats: 3, MaxCyclePeriod: 3, StallSteps: 3,
		SemanticRepeats: 3, SemanticWindow: 6, SemanticSimilarity: DefaultSemanticSimilarity}
}

// DefaultSemanticSimilarity is the estimated Jaccard similarity of argument
// words above which two calls ask the same question.
const DefaultSemanticSimilarity = 0.5

// LongTaskThresholds returns the defaults for runs expected to take more than
// a hundred steps, where legitimate re-reads and re-runs are more common.
func LongTaskThresholds() Thresholds {
	return Thresholds{SameInRow: 5, Window: 8, WindowRepeats: 5, MaxCyclePeriod: 4, StallSteps: 8,
		SemanticRepeats: 5, SemanticWindow: 8, SemanticSimilarity: DefaultSemanticSimilarity}
}

// maxThreshold bounds every threshold and so the ring of remembered steps.
const maxThreshold = 64

func (t Thresholds) normalized() Thresholds {
	clamp := func(v, lo int) int {
		switch {
		case v <= 0:
			return 0
		case v < lo:
			return lo
		case v > maxThreshold:
			return maxThreshold
		}
		return v
	}
	t.SameInRow = clamp(t.SameInRow, 2)
	t.Window = clamp(t.Window, 2)
	t.WindowRepeats = clamp(t.WindowRepeats, 2)
	if t.Window == 0 || t.WindowRepeats == 0 {
		t.Window, t.WindowRepeats = 0, 0
	}
	t.WindowRepeats = min(t.WindowRepeats, t.Window)
	t.MaxCyclePeriod = clamp(t.MaxCyclePeriod, 2)
	if t.MaxCyclePeriod*2 > maxThreshold {
		t.MaxCyclePeriod = maxThreshold / 2
	}
	t.StallSteps = clamp(t.StallSteps, 1)
	t.SemanticRepeats = clamp(t.SemanticRepeats, 2)
	t.SemanticWindow = clamp(t.SemanticWindow, 2)
	if t.SemanticRepeats == 0 || t.SemanticWindow == 0 || !(t.SemanticSimilarity > 0) {
		t.SemanticRepeats, t.SemanticWindow, t.SemanticSimilarity = 0, 0, 0
	}
	t.SemanticRepeats = min(t.SemanticRepeats, t.SemanticWindow)
	t.SemanticSimilarity = min(t.SemanticSimilarity, 1)
	return t
}

// ringSize is how many steps a guard remembers: enough for every detector,
// plus slack for steps whose results are still outstanding.
func (t Thresholds) ringSize() int {
	return max(t.SameInRow, t.Window, 2*t.MaxCyclePeriod, t.StallSteps, t.SemanticWindow, 1) + inFlightSlack
}

const inFlightSlack = 4
