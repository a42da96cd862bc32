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

// Cancel ends a run (id is a reference, RunRef): in-flight calls are cut, the next call is answered with
// the termination. Its sub-agent runs end with it (cascade.go) before
// Cancel returns.
func (p *Pipeline) Cancel(id string) (runstate.Record, error) {
	r, unlock, err := p.controlRun(id)
	if err != nil {
		return runstate.Record{}, err
	}
	now := p.now()
	if r.State.Final() {
		defer unlock()
		return r.Snapshot(now), ErrAlreadyEnded
	}
	done := p.terminate(r, govOf(r), runstate.Termination{Reason: runstate.ReasonCancelled, Detail: "cancelled through the control plane"}, runstate.Cancelled, now)
	r.CancelInflight()
	p.wait(p.persist(r), r.ID) // under the lock: the next replica must see it
	rec := r.Snapshot(now)
	unlock()
	if done != nil {
		<-done
	}
	return rec, nil
}

// Resume reopens a recoverable run (id is a reference, RunRef) with more budget: add is added to every
// limit the run has (a zero field adds nothing); the run keeps its history,
// counters and ledger.
func (p *Pipeline) Resume(id, token string, add accounting.Budget) (runstate.Record, error) {
	r, unlock, err := p.controlRun(id)
	if err != nil {
		return runstate.Record{}, err
	}
	defer unlock()
	now := p.now()
	if !r.State.Final() {
		return r.Snapshot(now), ErrNotEnded
	}
	if !r.Resume(token, now) {
		return r.Snapshot(now), ErrNotResumable
	}
	if g := govOf(r); g != nil {
		lim := budgetOf(g.limits).Vector
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
		enforced := enforcedOnly(lim, g.term)
		if err := p.book.SetLimit(context.Background(), g.ledger, enforced, finalReserve(enforced, g.limits.FinalReserve)); err != nil {
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

// controlRun finds and locks a run for a control-plane action: the run
// lock across replicas, then the run itself, brought up to date. unlock
// releases both.
// id is a reference (RunRef).
func (p *Pipeline) controlRun(id string) (*runstate.Run, func(), error) {
	id, err := p.resolveRun(id)
	if err != nil {
		return nil, nil, err
	}
	return p.lockedRun(id)
}
