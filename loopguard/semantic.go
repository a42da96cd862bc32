package loopguard

import "fmt"

// plainShape stands in for a call's shape in the observation keys of the
// semantic detector: there a result is new only if the run never saw it
// after any call. A rephrased question has a new shape every time, so the
// shape-paired rule would call each "no results" new.
const plainShape = 0x5e3a_471c_9b2d_e6f1

// detectSemantic looks, for each call of the newest step, for
// SemanticRepeats−1 earlier steps among the last SemanticWindow that made a
// call of the same agent and tool whose arguments are similar to it and to
// each other, with no result new in itself observed since the oldest of
// them (its own result included). Exact repeats are the other detectors'
// and they run first; this one reports, and consumes, only its own
// evidence.
func (g *Guard) detectSemantic(calls []Call) *Verdict {
	n, w := g.th.SemanticRepeats, g.th.SemanticWindow
	if n <= 0 {
		return nil
	}
	lo := g.liveFrom(g.smark)
	k := g.n - 1
	cur := g.at(k)
	from := max(lo, k-w+1)
	var picked [maxThreshold]*callRec
	for ci := range cur.calls {
		c := &cur.calls[ci]
		if c.sk.IsZero() {
			continue
		}
		picked[0] = c
		cnt := 1
		for i := k - 1; i >= from && cnt < n; i-- {
			s := g.at(i)
			if s.pepoch != cur.pepoch {
				break
			}
			if e := g.similarCall(s, picked[:cnt]); e != nil {
				picked[cnt] = e
				cnt++
			}
		}
		if cnt >= n {
			g.smark = g.seq
			fps := make([]Fingerprint, 0, cnt)
			for j := cnt - 1; j >= 0; j-- {
				if len(fps) < maxVerdictFingerprints {
					fps = append(fps, picked[j].fp)
				}
			}
			return report(ReasonLoop, DetectorSemantic, cur.step, fps,
				fmt.Sprintf("%s called %d times in the last %d steps with near-identical arguments (estimated word similarity at least %.2f) and nothing new observed in between",
					toolOf(calls, c.fp), cnt, w, g.th.SemanticSimilarity))
		}
	}
	return nil
}

// similarCall returns a call of step s similar to every picked call, or nil.
func (g *Guard) similarCall(s *stepRec, picked []*callRec) *callRec {
	for j := range s.calls {
		e := &s.calls[j]
		ok := !e.sk.IsZero()
		for _, p := range picked {
			if !ok {
				break
			}
			ok = e.sk.Similar(&p.sk, g.th.SemanticSimilarity)
		}
		if ok {
			return e
		}
	}
	return nil
}
