package pipeline

import (
	"fmt"
	"time"

	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
)

// endOverdue ends the runs whose deadline passed while nothing was in
// flight, as their next call would (the deadline line, enforced): a run
// whose agent went away would otherwise hold memory, be loaded again at
// every restart and never get a termination record. A deadline in shadow
// mode ends nothing; a run without a deadline waits. A run whose stored
// state says a model call is in flight (another replica's, which this
// one's count does not see) waits out the upstream timeout past its
// deadline: no call lasts longer, so after it the call was lost with its
// replica.
func (p *Pipeline) endOverdue(now time.Time) int {
	n := 0
	for _, cand := range p.runs.Overdue(now) {
		r, unlock, err := p.controlRun(cand.ID)
		if err != nil {
			continue // another replica's lock, or the store: the next sweep tries again
		}
		g := govOf(r)
		callGone := r.State != runstate.Deciding || -r.Remaining(now) > p.opts.UpstreamTimeout
		if !r.State.Final() && r.Inflight == 0 && r.Remaining(now) <= 0 && callGone && g != nil &&
			g.limits.DeadlineMs > 0 && g.term.EnforcementOf(runstate.ReasonDeadline) != policy.Shadow {
			p.terminate(r, g, runstate.Termination{Reason: runstate.ReasonDeadline,
				Detail: fmt.Sprintf("deadline of %d ms passed with no call in flight", g.limits.DeadlineMs)},
				runstate.Terminated, now)
			p.wait(p.persist(r), r.ID)
			n++
		}
		unlock()
	}
	return n
}

// EndOverdue ends now what the sweeper would (for tests and tools).
func (p *Pipeline) EndOverdue() int { return p.endOverdue(p.now()) }
