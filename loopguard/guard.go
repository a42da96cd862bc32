package loopguard

import (
	"fmt"
	"strings"
)

// Reasons and detector names carried by a Verdict.
const (
	ReasonLoop    = "loop_detected"
	ReasonStalled = "stalled"

	DetectorSameInRow = "same_in_row"
	DetectorWindow    = "window"
	DetectorCycle     = "cycle"
	DetectorStall     = "stall"
	DetectorSemantic  = "semantic"
)

// MaxCallsPerStep bounds what one step remembers; further parallel calls in
// the same step are ignored by the detectors.
const MaxCallsPerStep = 32

// maxVerdictFingerprints bounds the evidence listed in a verdict.
const maxVerdictFingerprints = 8

// Call is one tool call of a model decision.
type Call struct {
	ID   string // the provider's tool-call id; Observe matches results by it
	Tool string
	FP   Fingerprint
	// Sketch feeds the semantic detector; a zero Sketch leaves the call
	// out of it.
	Sketch Sketch
}

// Verdict reports a loop or a stall. The guard only reports; ending the run
// (or recording a shadow hit) is the caller's decision.
type Verdict struct {
	Reason       string   // ReasonLoop or ReasonStalled
	Detector     string   // DetectorSameInRow, DetectorWindow, DetectorCycle, DetectorStall or DetectorSemantic
	Step         int      // the step that completed the pattern
	Fingerprints []string // the repeated fingerprints (Fingerprint.String)
	Detail       string   // one human-readable sentence
}

type callRec struct {
	id       uint64 // FNV-1a of the call id; strings are not kept
	fp       Fingerprint
	observed bool
	sk       Sketch
}

type stepRec struct {
	seq     uint64 // guard-assigned, strictly increasing
	step    int    // the caller's step number, for verdicts
	epoch   uint64 // new observations the run had seen when the step was decided
	pepoch  uint64 // likewise, counting results new in themselves (semantic detector)
	calls   []callRec
	pending int  // calls whose result has not arrived
	newObs  bool // some result of this step was new to the run
}

func (s *stepRec) has(fp Fingerprint) bool {
	for i := range s.calls {
		if s.calls[i].fp == fp {
			return true
		}
	}
	return false
}

// sameCalls reports whether two steps made the same set of calls.
func (s *stepRec) sameCalls(o *stepRec) bool {
	for i := range s.calls {
		if !o.has(s.calls[i].fp) {
			return false
		}
	}
	for i := range o.calls {
		if !s.has(o.calls[i].fp) {
			return false
		}
	}
	return true
}

// Guard watches one run. It is not safe for concurrent use: the caller holds
// the run's lock. Its memory is bounded by the thresholds (a ring of recent
// steps) and MaxSeenObservations.
type Guard struct {
	th    Thresholds
	ring  []stepRec
	head  int // index of the oldest step in ring
	n     int // steps in ring
	seq   uint64
	epoch uint64 // count of new observations so far
	mark  uint64 // steps with seq < mark were consumed by a verdict
	seen  seenSet
	// The semantic detector's own epoch and mark: its verdicts consume
	// only its own evidence, so that a line in shadow mode never delays
	// the verdicts of the others.
	pepoch uint64
	smark  uint64
}

// NewGuard returns a guard for one run.
func NewGuard(th Thresholds) *Guard {
	th = th.normalized()
	return &Guard{th: th, ring: make([]stepRec, th.ringSize())}
}

// Thresholds returns the thresholds in force, after clamping.
func (g *Guard) Thresholds() Thresholds { return g.th }

func (g *Guard) at(i int) *stepRec { return &g.ring[(g.head+i)%len(g.ring)] }

// live returns the index of the oldest step not consumed by a verdict.
func (g *Guard) live() int { return g.liveFrom(g.mark) }

func (g *Guard) liveFrom(mark uint64) int {
	lo := 0
	for lo < g.n && g.at(lo).seq < mark {
		lo++
	}
	return lo
}

func (g *Guard) push() *stepRec {
	if g.n == len(g.ring) {
		g.head = (g.head + 1) % len(g.ring)
		g.n--
	}
	s := g.at(g.n)
	g.n++
	s.calls = s.calls[:0]
	s.seq = g.seq
	g.seq++
	return s
}

func hashID(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return h
}

// Step records a model decision and its tool calls, as soon as they are
// known (before they run), and reports a loop if the decision completes one.
// Report the results the decision was based on (Observe) before calling
// Step. A decision without tool calls is not recorded: it neither extends
// nor breaks a pattern.
func (g *Guard) Step(step int, calls []Call) *Verdict {
	if len(calls) == 0 {
		return nil
	}
	s := g.push()
	s.step = step
	s.epoch = g.epoch
	s.pepoch = g.pepoch
	s.newObs = false
	for _, c := range calls {
		if len(s.calls) == MaxCallsPerStep {
			break
		}
		s.calls = append(s.calls, callRec{id: hashID(c.ID), fp: c.FP, sk: c.Sketch})
	}
	s.pending = len(s.calls)
	if v := g.detectLoop(calls); v != nil {
		return v
	}
	return g.detectSemantic(calls)
}

// Observe records the result of an earlier call and reports a stall if it
// completes one. A result for an unknown call id still counts as something
// the run has seen.
func (g *Guard) Observe(callID string, obs Fingerprint) *Verdict {
	id := hashID(callID)
	var step *stepRec
	var call *callRec
	// Prefer the newest call still waiting for its result; ids are reused
	// by some frameworks ("call_0" on every step).
	for pass := 0; pass < 2 && call == nil; pass++ {
		for i := g.n - 1; i >= 0 && call == nil; i-- {
			s := g.at(i)
			for j := range s.calls {
				c := &s.calls[j]
				if c.id == id && (pass == 1 || !c.observed) {
					step, call = s, c
					break
				}
			}
		}
	}
	var shape uint64
	if call != nil {
		shape = call.fp.shape()
	}
	isNew := g.seen.add(makeObsKey(shape, obs))
	if isNew {
		g.epoch++
	}
	if g.th.SemanticRepeats > 0 && g.seen.add(makeObsKey(plainShape, obs)) {
		g.pepoch++
	}
	if call != nil {
		if !call.observed {
			call.observed = true
			step.pending--
		}
		if isNew {
			step.newObs = true
		}
	}
	return g.detectStall()
}

// detectLoop runs the repeat detectors on the newest step. A repeat counts
// only if the run observed nothing new since the earlier occurrence, which
// with a monotonic count of new observations means: both steps carry the
// same epoch.
func (g *Guard) detectLoop(calls []Call) *Verdict {
	lo := g.live()
	k := g.n - 1
	cur := g.at(k)

	if n := g.th.SameInRow; n > 0 {
		for ci := range cur.calls {
			fp := cur.calls[ci].fp
			cnt := 1
			for i := k - 1; i >= lo && cnt < n; i-- {
				s := g.at(i)
				if s.epoch != cur.epoch || !s.has(fp) {
					break
				}
				cnt++
			}
			if cnt >= n {
				return g.verdict(ReasonLoop, DetectorSameInRow, cur.step, []Fingerprint{fp},
					fmt.Sprintf("%s called %d times in a row with nothing new observed in between", toolOf(calls, fp), cnt))
			}
		}
	}

	for p := 2; p <= g.th.MaxCyclePeriod; p++ {
		if k-2*p+1 < lo || g.at(k-2*p+1).epoch != cur.epoch {
			continue
		}
		if g.repeats(k, p) {
			return g.verdict(ReasonLoop, DetectorCycle, cur.step, g.cycleFPs(k, p),
				fmt.Sprintf("a cycle of period %d repeated with nothing new observed", p))
		}
	}

	if w, r := g.th.Window, g.th.WindowRepeats; w > 0 {
		from := max(lo, k-w+1)
		for ci := range cur.calls {
			fp := cur.calls[ci].fp
			cnt := 0
			for i := k; i >= from; i-- {
				s := g.at(i)
				if s.epoch != cur.epoch {
					break
				}
				if s.has(fp) {
					cnt++
				}
			}
			if cnt >= r {
				return g.verdict(ReasonLoop, DetectorWindow, cur.step, []Fingerprint{fp},
					fmt.Sprintf("%s called %d times in the last %d steps with nothing new observed in between", toolOf(calls, fp), cnt, w))
			}
		}
	}
	return nil
}

// detectStall counts, from the newest step whose results are all in, the
// consecutive steps none of whose results was new. Newer steps still waiting
// for results are skipped; an older one with a missing result ends the
// count, because what it would have observed is unknown.
func (g *Guard) detectStall() *Verdict {
	n := g.th.StallSteps
	if n <= 0 {
		return nil
	}
	lo := g.live()
	i := g.n - 1
	for i >= lo && g.at(i).pending > 0 {
		i--
	}
	last := i
	cnt := 0
	for ; i >= lo && cnt < n; i-- {
		s := g.at(i)
		if s.pending > 0 || s.newObs {
			break
		}
		cnt++
	}
	if cnt < n {
		return nil
	}
	// The most specific name: a stall whose steps repeat with a short
	// period is a cycle the cycle detector had not caught yet (its evidence
	// needs two full periods with nothing new observed), named as one.
	if p := g.stallPeriod(last, lo); p > 0 {
		return g.verdict(ReasonLoop, DetectorCycle, g.at(last).step, g.cycleFPs(last, p),
			fmt.Sprintf("%d steps in a row observed nothing new, repeating a cycle of period %d", cnt, p))
	}
	var fps []Fingerprint
	for j := i + 1; j <= last; j++ {
		fps = appendStepFPs(fps, g.at(j))
	}
	return g.verdict(ReasonStalled, DetectorStall, g.at(last).step, fps,
		fmt.Sprintf("%d steps in a row observed nothing new", cnt))
}

// stallMaxCyclePeriod is the longest period for which a stall is named a
// cycle.
const stallMaxCyclePeriod = 3

// stallPeriod returns the period (2 or 3) with which the steps up to last
// repeat over two full periods, or 0.
func (g *Guard) stallPeriod(last, lo int) int {
	for p := 2; p <= stallMaxCyclePeriod && last-2*p+1 >= lo; p++ {
		if g.repeats(last, p) {
			return p
		}
	}
	return 0
}

// repeats reports whether each of the p steps up to k makes the same calls
// as the step p before it, and they are not all one call: a constant
// pattern is a period-1 repeat, the same_in_row case.
func (g *Guard) repeats(k, p int) bool {
	for j := 0; j < p; j++ {
		if !g.at(k - j).sameCalls(g.at(k - j - p)) {
			return false
		}
	}
	for j := 1; j < p; j++ {
		if !g.at(k).sameCalls(g.at(k - j)) {
			return true
		}
	}
	return false
}

// cycleFPs are the fingerprints of one period of a cycle ending at step k.
func (g *Guard) cycleFPs(k, p int) []Fingerprint {
	fps := make([]Fingerprint, 0, p)
	for j := p - 1; j >= 0; j-- {
		fps = appendStepFPs(fps, g.at(k-j))
	}
	return fps
}

func appendStepFPs(fps []Fingerprint, s *stepRec) []Fingerprint {
	for i := range s.calls {
		fp := s.calls[i].fp
		dup := false
		for _, f := range fps {
			dup = dup || f == fp
		}
		if !dup && len(fps) < maxVerdictFingerprints {
			fps = append(fps, fp)
		}
	}
	return fps
}

func toolOf(calls []Call, fp Fingerprint) string {
	for _, c := range calls {
		if c.FP == fp && c.Tool != "" {
			return fmt.Sprintf("tool %q", c.Tool)
		}
	}
	return "fingerprint " + fp.String()
}

// verdict builds the report and consumes the evidence: steps up to now no
// longer count, so a loop that goes on (in shadow mode) is reported again
// only once it has built up the full threshold anew.
func (g *Guard) verdict(reason, detector string, step int, fps []Fingerprint, detail string) *Verdict {
	g.mark, g.smark = g.seq, g.seq
	return report(reason, detector, step, fps, detail)
}

// report builds a verdict without consuming evidence.
func report(reason, detector string, step int, fps []Fingerprint, detail string) *Verdict {
	v := &Verdict{Reason: reason, Detector: detector, Step: step, Detail: detail}
	if len(fps) > 0 {
		v.Fingerprints = make([]string, len(fps))
		for i, f := range fps {
			v.Fingerprints[i] = f.String()
		}
		v.Detail += " (" + strings.Join(v.Fingerprints, ", ") + ")"
	}
	return v
}
