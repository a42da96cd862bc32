package contextmgr

import (
	"unsafe"

	"github.com/haltline/haltline/wire"
)

// plan holds one Rewrite's reading of the request: per-item weights for
// choosing the cut, pairing for validating it, and what the builder (see
// build.go) decided and cached for the forwarded body.
type plan struct {
	rw   *Rewriter
	c    *conv
	st   *State
	body []byte
	rep  *Report

	w     []int64 // planned weight of each item, cut applied
	dropW []int64 // dropW[i]: weight of the droppable items [head, i)
	total int64   // weight of the whole request as planned

	turns []turn // turns after the head
	// starts[i]: a droppable turn starts at item i. blocked[i] > 0: a cut
	// at i would separate a tool call from its result.
	starts  []bool
	blocked []int32

	seen map[uint64]string // the builder's first occurrence of each result text
	// bounding: cuts whose handle is unknown are priced without asking
	// Blob for it; provisional: some were, so the estimate is a lower
	// bound.
	bounding, provisional bool
	decided               int    // the cut the results' replacements were decided for; -1 for none
	seg                   string // segment(st), while segOK
	segOK                 bool
	place                 placement // where seg goes in the forwarded body, while placeOK
	placeOK               bool
	env                   []byte   // the body with "[]" for the list, built once
	last                  assembly // the body assembled for the last decision, when it had to be
}

// noteWeight reserves the cut note's weight (a sentence and a handle).
const noteWeight = 40 * weightScale

// index groups the items into turns and finds, once for every cut, whether
// it would separate a call from its result: a cut at k does when a
// droppable item before k makes a call last answered at k or later, or
// answers a call last made at k or later.
func (p *plan) index() {
	c := p.c
	items := c.items
	n := len(items)
	p.decided = -1
	p.turns = turnsOf(items, c.head)
	p.starts = make([]bool, n+1)
	for _, t := range p.turns {
		if !t.sticky {
			p.starts[t.start] = true
		}
	}
	callAt, resultAt := c.callAt, c.resultAt
	if callAt == nil {
		callAt, resultAt = make(map[string]int, n), make(map[string]int, n)
		c.callAt, c.resultAt = callAt, resultAt
	}
	for i := range items {
		it := &items[i]
		for k := range it.results {
			resultAt[it.results[k].id] = i
		}
		for _, cl := range it.calls {
			callAt[cl.id] = i
		}
	}
	// The cuts in (i, j] are blocked by a pair at i and j > i: marked at
	// the ends, then summed.
	p.blocked = make([]int32, n+2)
	for i := c.head; i < n; i++ {
		it := &items[i]
		if it.kind == kindSystem {
			continue
		}
		for _, cl := range it.calls {
			if j, ok := resultAt[cl.id]; ok && j > i {
				p.blocked[i+1]++
				p.blocked[j+1]--
			}
		}
		for k := range it.results {
			if j, ok := callAt[it.results[k].id]; ok && j > i {
				p.blocked[i+1]++
				p.blocked[j+1]--
			}
		}
	}
	for k := 1; k <= n; k++ {
		p.blocked[k] += p.blocked[k-1]
	}
}

// weights computes the planning weights, on the first plan of a cut.
func (p *plan) weights() {
	if p.w != nil {
		return
	}
	c := p.c
	items := c.items
	p.w = make([]int64, len(items))
	p.dropW = make([]int64, len(items)+1)
	limit := p.rw.inlineLimit()
	p.total = c.envW
	for i := range items {
		it := &items[i]
		w := it.w
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" || r.rawLen() <= limit {
				continue
			}
			d := c.decoded(r)
			if len(d) <= limit {
				continue
			}
			// Planning only: bytes stand in for characters here, the build
			// cuts on characters. The middle is weighed as the body
			// carries it, escapes included, as it was counted in it.w.
			h, t := min(p.rw.head(), len(d)), max(len(d)-p.rw.tail(), 0)
			if h < t {
				w += noteWeight - marshalWeight(d[h:t])
			}
		}
		p.w[i] = w
		p.total += w
	}
	for i := range items {
		p.dropW[i+1] = p.dropW[i]
		if i >= c.head && items[i].kind != kindSystem {
			p.dropW[i+1] += p.w[i]
		}
	}
}

// valid reports whether dropping the droppable items [head, cut) leaves a
// request the provider accepts.
func (p *plan) valid(cut int) bool {
	c := p.c
	if cut == c.head {
		return true
	}
	if c.noDrop || cut < 0 || cut >= len(p.starts) || !p.starts[cut] {
		return false
	}
	if c.api == wire.APIMessages {
		// Strict alternation: the first kept message must not repeat the
		// role of the message before it.
		prev := ""
		for i := cut - 1; i >= 0; i-- {
			if i < c.head || c.items[i].kind == kindSystem {
				prev = c.items[i].role
				break
			}
		}
		if prev == c.items[cut].role {
			return false
		}
	}
	return p.blocked[cut] == 0
}

// dropped reports whether item i is left out of the request cut at cut.
func (p *plan) dropped(i, cut int) bool {
	return i >= p.c.head && i < cut && p.c.items[i].kind != kindSystem
}

// candidates returns the valid cuts after c0, the last turn always kept.
func (p *plan) candidates(c0 int) []int {
	last := -1
	for _, t := range p.turns {
		if !t.sticky {
			last = t.start
		}
	}
	var out []int
	for _, t := range p.turns {
		if t.sticky || t.start <= c0 || t.start > last {
			continue
		}
		if p.valid(t.start) {
			out = append(out, t.start)
		}
	}
	return out
}

// keepLimit returns the largest cut that keeps the last KeepTurns turns.
func (p *plan) keepLimit() int {
	k := p.rw.keepTurns()
	for i := len(p.turns) - 1; i >= 0; i-- {
		if p.turns[i].sticky {
			continue
		}
		k--
		if k == 0 {
			return p.turns[i].start
		}
	}
	return p.c.head
}

// summaryReserve is the weight planned for what a compression adds to the
// system segment (a new summary part and its facts).
const summaryReserve = (newSummaryMax*300 + 100*weightScale)

// planned estimates the tokens of the request cut at cut.
func (p *plan) planned(cut int) int64 {
	p.weights()
	seg := p.segment()
	w := weigh(unsafe.Slice(unsafe.StringData(seg), len(seg))) + summaryReserve
	return finish(p.c.api, p.total-p.dropW[cut]+w, p.c.envTools)
}

// segment returns the system segment of the run's state, rendered once
// per state change (stateChanged).
func (p *plan) segment() string {
	if !p.segOK {
		p.seg, p.segOK = segment(p.st), true
	}
	return p.seg
}

// stateChanged notes that the run's state (summary, facts, cut) changed.
func (p *plan) stateChanged() { p.segOK, p.placeOK = false, false }
