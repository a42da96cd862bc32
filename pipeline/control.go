package pipeline

import (
	"context"
	"errors"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
)

// Control-plane errors.
var (
	ErrNoRun        = errors.New("no such run")
	ErrNotEnded     = errors.New("run has not ended")
	ErrNotResumable = errors.New("run is not recoverable, or the resume token does not match")
	ErrAlreadyEnded = errors.New("run has already ended")
)

// Cancel ends a run: in-flight calls are cut, the next call is answered with
// the termination.
func (p *Pipeline) Cancel(id string) (runstate.Record, error) {
	r := p.runs.Get(id)
	if r == nil {
		return runstate.Record{}, ErrNoRun
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	now := p.now()
	if r.State.Final() {
		return r.Snapshot(now), ErrAlreadyEnded
	}
	p.terminate(r, govOf(r), runstate.Termination{Reason: runstate.ReasonCancelled, Detail: "cancelled through the control plane"}, runstate.Cancelled, now)
	r.CancelInflight()
	p.wait(p.persist(r), r.ID)
	return r.Snapshot(now), nil
}

// Resume reopens a recoverable run with more budget: add is added to every
// limit the run has (a zero field adds nothing); the run keeps its history,
// counters and ledger.
func (p *Pipeline) Resume(id, token string, add accounting.Budget) (runstate.Record, error) {
	r := p.runs.Get(id)
	if r == nil {
		return runstate.Record{}, ErrNoRun
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	now := p.now()
	if !r.State.Final() {
		return r.Snapshot(now), ErrNotEnded
	}
	if !r.Resume(token, now) {
		return r.Snapshot(now), ErrNotResumable
	}
	if g := govOf(r); g != nil {
		lim, _, _, err := p.book.Snapshot(context.Background(), g.ledger, now)
		if err != nil {
			return r.Snapshot(now), err
		}
		grow := func(v *int64, a int64) {
			if *v > 0 && a > 0 {
				*v += a
			}
		}
		grow(&lim.Steps, add.Steps)
		grow(&lim.Tokens, add.Tokens)
		grow(&lim.InputTokens, add.InputTokens)
		grow(&lim.OutputTokens, add.OutputTokens)
		grow(&lim.ToolCalls, add.ToolCalls)
		c := int64(lim.Cost)
		grow(&c, int64(add.Cost))
		lim.Cost = accounting.Money(c)
		if err := p.book.SetLimit(context.Background(), g.ledger, lim, finalReserve(lim, g.limits.FinalReserve)); err != nil {
			return r.Snapshot(now), err
		}
		g.limits.MaxSteps, g.limits.MaxTokens, g.limits.MaxToolCalls = lim.Steps, lim.Tokens, lim.ToolCalls
		g.limits.MaxInputTokens, g.limits.MaxOutputTokens = lim.InputTokens, lim.OutputTokens
		g.limits.MaxCostUSD = lim.Cost.USD()
		if g.limits.DeadlineMs > 0 && add.DeadlineMs > 0 {
			g.limits.DeadlineMs += add.DeadlineMs
		}
		r.MaxSteps, r.DeadlineMs = g.limits.MaxSteps, g.limits.DeadlineMs
		// The detectors start afresh: the operator judged the run worth more.
		g.guard = newGuard(g)
	}
	p.wait(p.persist(r), r.ID)
	return r.Snapshot(now), nil
}
