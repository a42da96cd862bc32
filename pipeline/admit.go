package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// minWrapUpOutput is the smallest output worth a wrap-up call; below it the
// gateway answers itself.
const minWrapUpOutput = 64

// WrapUpInstruction is appended to the wrap-up call (docs/design.md §5).
const WrapUpInstruction = "This run has reached its budget. Do not call any tools. " +
	"Give your best conclusion from what you have so far, and list what is unfinished."

// Begin runs parse, identify, admit and rewrite for one model call
// (docs/design.md §1, "A model call's path"). It never fails: a refusal or
// a fault is an Answer on the turn. Finish must follow every Begin.
func (p *Pipeline) Begin(ctx context.Context, call *Call, codec wire.Codec) *Turn {
	t := &Turn{Call: call, codec: codec, started: p.now()}
	// parse
	req, err := codec.ParseRequest(call.Body)
	if err != nil {
		t.Answer = errorAnswer(codec, wire.ErrInvalidRequest, "invalid request body: "+err.Error(), nil)
		return t
	}
	t.Req = req
	if err := checkRunNames(call.RunID, call.ParentRunID, call.SessionID); err != nil {
		t.Answer = errorAnswer(codec, wire.ErrInvalidRequest, err.Error(), nil)
		return t
	}
	// identify
	r, created, named, err := p.identify(ctx, call, &t.Req)
	if err != nil {
		t.Answer = errorAnswer(codec, wire.ErrUnavailable, "run store unavailable, retry later", nil)
		return t
	}
	// Without the lock on the replica that moved the run last, or that
	// makes it: the reservation and the run's write in one round trip.
	var free accounting.Rider
	if began, again, rider := p.beginAhead(ctx, t, r, created, named); began {
		return t
	} else if again != nil {
		t, free = again, rider
		if named == "" && created { // the run made anew, left memory
			r, created = p.runs.GetOrCreate(r.Identity)
		}
	}
	// lock: the run's transaction, up to date with the store
	var tx runtx.Tx
	if named != "" {
		if tx, r, created, err = p.openNamed(ctx, call, named, free); err != nil {
			p.namedUnavailable(t, named, err)
			return t
		}
		t.run = r
	} else {
		t.run = r
		tx, err = p.tx.Open(ctx, r, runtx.Need{Ledger: true, Rider: free})
		p.freed(ctx, r.ID, free)
		if err != nil {
			p.unavailable(t, err)
			return t
		}
	}
	t.ledgerAtLock, t.ledgerReadAtLock = tx.Ledger(), tx.LedgerRead()
	// govern, admit, rewrite
	p.beginLocked(ctx, t, r, created)
	p.makeLedgersLeft(ctx, t, r)
	p.recordBegin(t, r)
	// commit
	t.committing = tx.Commit(p.beginCommit(t, r, created)).Landed()
	return t
}

// beginCommit is how Begin's writes reach the store. A forwarded call's
// writes nobody waits for: a call's reservation goes out with the store's
// next commit — often this call's own Finish — or within a millisecond (a
// commit of its own cost a write(2) on the way to the provider); a new run
// is written whole by that Finish, or by SaveUnsaved past a millisecond.
// An answer given here (a refusal, an end) is committed before it leaves.
// When replicas share the store, everything is committed before the next
// replica can take the run's lock: a forwarded call goes on while its
// commit is on its way (runtx.Behind), the commit letting go of the lock
// after its writes, and the call's Finish lands it before taking the lock
// again. The reservation is in the book already: a crash before the
// commit loses what the embedded store's Later loses, the call's start.
// The caller holds r's mutex.
func (p *Pipeline) beginCommit(t *Turn, r *runstate.Run, created bool) runtx.Mode {
	switch {
	case p.shared() && t.Answer == nil && !r.State.Final():
		return runtx.Behind
	case p.shared():
		return runtx.Wait
	case t.Answer != nil || r.State.Final():
		// A refusal or an end is on disk before it leaves: a restart must
		// not bring back a run its agent was told had ended.
		return runtx.Wait
	case created:
		return runtx.Soon
	}
	return runtx.Later // the run itself is written at Finish
}

func (p *Pipeline) beginLocked(ctx context.Context, t *Turn, r *runstate.Run, created bool) {
	now := p.now()
	call, codec := t.Call, t.codec
	if r.Ext == nil {
		// The lock read that the run's ledger does not exist: its
		// reservation can make it (Turn.ahead).
		later := t.ledgerReadAtLock && t.ledgerAtLock == nil
		g, ensured, ahead, err := p.govern(ctx, r, call, later)
		if err != nil {
			var bad badRequest
			var missing notFound
			var down unavailable
			if errors.As(err, &bad) {
				t.Answer = errorAnswer(codec, wire.ErrInvalidRequest, err.Error(), nil)
			} else if errors.As(err, &missing) {
				t.Answer = errorAnswer(codec, wire.ErrNotFound, err.Error(), nil)
			} else if errors.As(err, &down) {
				p.unavailable(t, err)
			} else {
				// Fail closed: a policy that cannot answer never means allow.
				p.log.Error("policy evaluation failed", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
				t.Answer = errorAnswer(codec, wire.ErrUnavailable, "policy unavailable", nil)
			}
			return
		}
		r.Ext = g
		g.held = t.tells // a new run's start without the lock (beginGuarded)
		t.ahead = ahead
		if ensured != nil {
			t.ledgerAtLock = ensured // the lock found no ledger: it did not exist yet
		}
		if created {
			r.Record(now, runstate.Event{Type: runstate.EventTransition, To: runstate.Ready, Detail: "run started"})
			if g.holding() {
				g.hold(p.obs.RunStarted)
			} else {
				p.obs.RunStarted()
			}
		}
	}
	g := govOf(r)
	p.observe(t, g, now)
	if p.admit(ctx, t, g, now) {
		return
	}
	p.forward(ctx, t, g, now)
}

// observe feeds the tool results in the request to the loop guard: they are
// the observations of the previous step.
func (p *Pipeline) observe(t *Turn, g *governance, now time.Time) {
	r := t.run
	for _, tr := range t.Req.ToolResults {
		if _, ok := r.Outstanding[tr.CallID]; !ok {
			continue // already observed, or not ours
		}
		delete(r.Outstanding, tr.CallID)
		if v := g.guard.Observe(tr.CallID, t.observation(g, tr)); v != nil {
			p.loopVerdict(t, g, v, now)
		}
	}
}

// admit applies the checks of docs/design.md §5 in order and reserves the call's
// worst case. It returns true when the turn is answered without forwarding.
func (p *Pipeline) admit(ctx context.Context, t *Turn, g *governance, now time.Time) bool {
	r := t.run
	// An agent that names a completed run and goes on reopens it.
	if r.State == runstate.Completed && t.Call.RunID != "" {
		r.Reopen(now)
	}
	// cancelled → completed (and every other end): the run answers with its termination.
	if r.State.Final() {
		t.Answer = p.endedAnswer(t, g)
		return true
	}
	if r.ParentID != "" {
		if term := p.endedAncestor(r); term != nil {
			return p.end(t, g, *term, now)
		}
	}
	if t.pendingEnd != nil { // a loop or stall verdict from the observations
		return p.end(t, g, *t.pendingEnd, now)
	}
	lim := g.limits
	// deadline
	remaining := r.Remaining(now)
	if lim.DeadlineMs > 0 && remaining <= 0 {
		if p.line(t, g, runstate.Termination{Reason: runstate.ReasonDeadline,
			Detail: fmt.Sprintf("deadline of %d ms passed", lim.DeadlineMs)}, now) {
			return true
		}
	}
	spent, reserved, err := p.runLedger(ctx, t, g, now)
	if err != nil {
		return p.unavailable(t, err)
	}
	step := spent.Steps + reserved.Steps + 1
	t.step = step
	// steps
	if lim.MaxSteps > 0 && step > lim.MaxSteps {
		if p.line(t, g, runstate.Termination{Reason: runstate.ReasonMaxSteps,
			Detail: fmt.Sprintf("%d of %d steps taken", step-1, lim.MaxSteps)}, now) {
			return true
		}
	}
	// tokens, cost, tool quota: a budget already spent ends the run here;
	// one that only lacks room for this call's worst case is met by the
	// reservation below: a lower output cap, else a wrap-up.
	c := r.Counters
	if lim.MaxTokens > 0 && c.InputTokens+c.OutputTokens >= lim.MaxTokens {
		if p.line(t, g, runstate.Termination{Reason: runstate.ReasonTokenBudget,
			Detail: fmt.Sprintf("%d of %d tokens used", c.InputTokens+c.OutputTokens, lim.MaxTokens)}, now) {
			return true
		}
	}
	if maxCost := accounting.USD(lim.MaxCostUSD); maxCost > 0 && accounting.Money(c.ActualCost) >= maxCost {
		if p.line(t, g, runstate.Termination{Reason: runstate.ReasonCostBudget,
			Detail: fmt.Sprintf("%s of %s USD spent", accounting.Money(c.ActualCost), maxCost)}, now) {
			return true
		}
	}
	if lim.MaxToolCalls > 0 && c.ToolCalls > lim.MaxToolCalls {
		if p.line(t, g, runstate.Termination{Reason: runstate.ReasonToolQuota,
			Detail: fmt.Sprintf("%d tool calls of %d allowed", c.ToolCalls, lim.MaxToolCalls)}, now) {
			return true
		}
	}
	// model policy
	maxOut := t.Req.MaxOutputTokens
	if maxOut <= 0 {
		maxOut = lim.DefaultMaxOutputTokens
	}
	if p.pol != nil {
		in := policy.ModelInput{RunInput: runInput(r, t.Call.Principal, now), Model: policy.ModelInfo{
			Name: t.Req.Model, Provider: t.Req.API.Provider(), Stream: t.Req.Stream, MaxOutputTokens: t.Req.MaxOutputTokens}}
		d, err := p.pol.Model(ctx, in)
		if err != nil {
			p.log.Error("model policy failed", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
			t.Answer = errorAnswer(t.codec, wire.ErrUnavailable, "policy unavailable", nil)
			return true
		}
		if !d.Allow() {
			if p.line(t, g, runstate.Termination{Reason: runstate.ReasonPolicyDenied,
				Detail: "model call denied: " + joinReasons(d.Deny)}, now) {
				return true
			}
		}
		if d.MaxOutputTokens > 0 && d.MaxOutputTokens < maxOut {
			maxOut = d.MaxOutputTokens
		}
	}
	// reserve
	return p.reserve(ctx, t, g, maxOut, remaining, now)
}

// unavailable refuses a call that draws on a budget while the ledger book
// cannot be reached: fail closed, and the SDK may retry later.
func (p *Pipeline) unavailable(t *Turn, err error) bool {
	p.log.Error("ledger book unavailable", "run_id", runstate.NameOf(t.run.ID), "tenant", runstate.TenantOf(t.run.ID), "err", err)
	t.Answer = errorAnswer(t.codec, wire.ErrUnavailable, "budget store unavailable, retry later", nil)
	return true
}

// namedUnavailable refuses a call whose run, named and not held here,
// could not be had (openNamed): its lock, as unavailable does, or its
// stored state.
func (p *Pipeline) namedUnavailable(t *Turn, id string, err error) {
	msg := "budget store unavailable, retry later"
	if runtx.IsStale(err) {
		msg = "run store unavailable, retry later"
	}
	p.log.Error(msg, "run_id", runstate.NameOf(id), "tenant", runstate.TenantOf(id), "err", err)
	t.Answer = errorAnswer(t.codec, wire.ErrUnavailable, msg, nil)
}

// reserve books the call's worst case against every ledger it draws on.
// A call that does not fit the working budget first goes on with its output
// cap lowered to what fits (capOutput); below the floor it becomes the run's
// wrap-up, or the run ends when not even a wrap-up fits. In reject mode no
// call is rewritten: the call that does not fit is refused.
func (p *Pipeline) reserve(ctx context.Context, t *Turn, g *governance, maxOut int64, remaining time.Duration, now time.Time) bool {
	lim := g.limits
	price, ok := p.catalog.Lookup(t.Req.Model)
	t.price, t.priced = price, ok
	if ok && price.ContextWindow > 0 && t.Req.MaxOutputTokens > price.ContextWindow {
		// No model writes more than its context window holds; the
		// catalog knows no tighter output bound.
		t.Answer = errorAnswer(t.codec, wire.ErrInvalidRequest, fmt.Sprintf(
			"the output cap %d exceeds the context window of model %q (%d tokens)", t.Req.MaxOutputTokens, t.Req.Model, price.ContextWindow), nil)
		return true
	}
	if !ok && lim.MaxCostUSD > 0 {
		t.Answer = errorAnswer(t.codec, wire.ErrInvalidRequest, fmt.Sprintf(
			"model %q has no price in the catalog, so this run's cost budget cannot be enforced", t.Req.Model), nil)
		return true
	}
	reject := g.term.Mode == policy.ModeReject
	est := accounting.ReserveInput(g.scaleInput(p.inputEstimate(t, g)))
	wrapLine := ""
	// The last allowed step, the soft line, or a deadline inside the final
	// reserve make this call the wrap-up; in reject mode the call goes on
	// untouched until a line is crossed.
	// A line in shadow mode records a hit where enforcing it would have
	// wrapped the run up, and the call goes on untouched.
	wouldWrap := func(line, detail string) {
		if g.term.EnforcementOf(line) == policy.Shadow {
			p.shadow(t.run, runstate.Termination{Reason: line, Detail: detail}, t.step, now)
		} else if wrapLine == "" && !reject {
			wrapLine = line
		}
	}
	if lim.MaxSteps > 0 && (t.step >= lim.MaxSteps || float64(t.step-1) >= lim.SoftWrapUp*float64(lim.MaxSteps)) {
		wouldWrap(runstate.ReasonMaxSteps, fmt.Sprintf("step %d of %d: wrap-up", t.step, lim.MaxSteps))
	} else if t.run.ParentID != "" && len(g.ledgers) > 1 && !reject {
		// A sub-agent's last step may be its parent's: the steps left on
		// every ledger it draws on, this call's included.
		if err := p.makeLedgers(ctx, t); err != nil {
			return p.unavailable(t, err)
		}
		room, err := p.book.Headroom(ctx, g.ledgers, true, now)
		if err != nil {
			return p.unavailable(t, err)
		}
		if room.Steps <= 1 {
			wouldWrap(runstate.ReasonMaxSteps, "the parent run's last step: wrap-up")
		}
	}
	reserveTime := time.Duration(float64(lim.DeadlineMs)*lim.FinalReserve) * time.Millisecond
	t.Timeout = p.opts.UpstreamTimeout
	if lim.DeadlineMs > 0 {
		if work := remaining - reserveTime; work > 0 && !reject {
			t.Timeout = min(t.Timeout, work)
		} else {
			t.Timeout = min(t.Timeout, remaining)
			if work <= 0 {
				wouldWrap(runstate.ReasonDeadline, "only the final reserve of the deadline left: wrap-up")
			}
		}
	}
	if wrapLine == "" && !reject {
		line, err := p.softLine(ctx, t, g, lim.SoftWrapUp, now)
		if err != nil {
			return p.unavailable(t, err)
		}
		wrapLine = line
	}
	want := callVector(price, est, maxOut)
	if err := p.shadowBudgets(ctx, t, g, callVector(price, est, outputFloor(g, maxOut)), now); err != nil {
		return p.unavailable(t, err)
	}
	if wrapLine == "" {
		var res *accounting.Hold
		var short *accounting.Shortfall
		var err error
		ar, ahead := p.book.(ensureAheadReserver)
		hr, reads := p.book.(headroomReserver)
		switch {
		case t.reserveLater != nil:
			// With the run's guarded write (beginGuarded): taken as made
			// here, and the write stands only if it was.
			t.prepared = t.reserveLater.PrepareReserve(t.ahead, now, g.ledgers, want, false, p.opts.Lease, now, t.Req.Stream, true)
			res, t.ahead = t.prepared.Hold(), nil
		case ahead && t.ahead != nil:
			// The run's ledgers are made in the reservation's round trip.
			res, short, t.headroom, t.headroomRead, err = ar.ReserveEnsuring(ctx, t.ahead, now, g.ledgers, want, false, p.opts.Lease, now, t.Req.Stream, true)
			if err == nil {
				t.ahead = nil
			}
		case reads && t.Req.Stream:
			// A stream's headers go out before its settlement; an answer
			// given whole has its headroom read with the settlement.
			res, short, t.headroom, t.headroomRead, err = hr.ReserveHeadroom(ctx, g.ledgers, want, false, p.opts.Lease, now, true)
		default:
			res, short, err = p.book.Reserve(ctx, g.ledgers, want, false, p.opts.Lease, now)
		}
		if err != nil {
			return p.unavailable(t, err)
		}
		if short == nil {
			p.reservationSeen(g, "ok")
			t.res, t.reserved = res, want
			p.trackReservation(t, g, res)
			return false
		}
		t.headroomRead = false // a second reservation changes it
		if done, err := p.capOutput(ctx, t, g, maxOut, est, now); err != nil {
			return p.unavailable(t, err)
		} else if done {
			return false
		}
		wrapLine = shortfallLine(short)
		if reject {
			p.reservationSeen(g, "refused")
			return p.end(t, g, runstate.Termination{Reason: wrapLine, Detail: shortfallDetail(g, short)}, now)
		}
	}
	// Wrap-up: the output is capped so that the worst case fits what remains,
	// final reserve included.
	if err := p.makeLedgers(ctx, t); err != nil {
		return p.unavailable(t, err)
	}
	head, err := p.book.Headroom(ctx, g.ledgers, true, now)
	if err != nil {
		return p.unavailable(t, err)
	}
	out := fitOutput(head, t.price, t.priced, est, maxOut)
	if out < minWrapUpOutput {
		p.reservationSeen(g, "refused")
		return p.end(t, g, runstate.Termination{Reason: wrapLine, Detail: "no budget left even for a wrap-up"}, now)
	}
	want = callVector(price, est, out)
	res, short, err := p.book.Reserve(ctx, g.ledgers, want, true, p.opts.Lease, now)
	if err != nil {
		return p.unavailable(t, err)
	}
	if short != nil {
		p.reservationSeen(g, "refused")
		return p.end(t, g, runstate.Termination{Reason: shortfallLine(short), Detail: "no budget left even for a wrap-up"}, now)
	}
	p.reservationSeen(g, "wrap_up")
	p.trackReservation(t, g, res)
	t.res, t.reserved = res, want
	t.wrapUp, t.wrapLine = true, wrapLine
	t.wrapOut = out
	return false
}

// capOutput reserves a call whose worst case did not fit the working budget
// with its output cap lowered to what does fit, on every ledger it draws on,
// while the cap stays at or above the floor (policy min_output_tokens, or
// the call's own cap when lower). The call keeps its tools: a healthy run is
// not cut short because its framework asks for the model's largest output.
// It reports whether the call was reserved; false leaves the turn as it was.
func (p *Pipeline) capOutput(ctx context.Context, t *Turn, g *governance, maxOut, est int64, now time.Time) (bool, error) {
	floor := outputFloor(g, maxOut)
	head, err := p.book.Headroom(ctx, g.ledgers, false, now)
	if err != nil {
		return false, err
	}
	out := fitOutput(head, t.price, t.priced, est, maxOut)
	if out < floor || out >= maxOut {
		return false, nil
	}
	want := callVector(t.price, est, out)
	// Headroom is advisory: a concurrent call may have taken the room since,
	// and Reserve is what enforces.
	res, short, err := p.book.Reserve(ctx, g.ledgers, want, false, p.opts.Lease, now)
	if err != nil || short != nil {
		return false, err
	}
	p.reservationSeen(g, "output_capped")
	t.res, t.reserved = res, want
	p.trackReservation(t, g, res)
	t.run.Record(now, runstate.Event{Type: runstate.EventOutputCapped, Step: t.step,
		Detail: fmt.Sprintf("max output %d → %d to fit the budget left", maxOut, out)})
	return true, nil
}

// outputFloor is the lowest output cap a call keeps its tools with: policy
// min_output_tokens, or the call's own cap when that is lower.
func outputFloor(g *governance, maxOut int64) int64 {
	floor := g.limits.MinOutputTokens
	if floor <= 0 { // a run whose limits predate the floor
		floor = policy.DefaultMinOutputTokens
	}
	return min(floor, maxOut)
}

// inputEstimate is the context manager's estimate of the call's input
// tokens, the one the watermark is checked on: the body as the agent sent
// it, read from where the run's previous body ends. A replayed call's is
// the one recorded.
func (p *Pipeline) inputEstimate(t *Turn, g *governance) int64 {
	if rt := t.replayed(); rt != nil {
		t.inputEst = rt.inputEst
	} else {
		t.inputEst = g.estimate.Estimate(t.Req.API, t.Call.Body)
	}
	return t.inputEst
}

// calibrate learns from a settled call how far the provider's input count
// was above the estimate of its body: the run's next bodies begin with this
// one and go to the same tokenizer, so their estimates are raised by that
// ratio. A call whose count was below its estimate resets it: the
// estimate is then the worst case again. A reservation too low for what
// the call is billed would let spent pass a budget at settlement.
func (g *governance) calibrate(est, actual int64) {
	if est <= 0 || actual <= est {
		g.inputScale = 0
		return
	}
	g.inputScale = min(actual*1000/est+1, maxInputScale)
}

// maxInputScale bounds calibrate's ratio: a count far above the estimate
// is not the tokenizer's doing (a provider-side prompt, a cache write).
const maxInputScale = 8000

// scaleInput is est raised by the run's calibration.
func (g *governance) scaleInput(est int64) int64 {
	if g.inputScale <= 1000 {
		return est
	}
	return (est*g.inputScale + 999) / 1000
}

// callVector is what a model call reserves: one step and its worst case.
func callVector(price accounting.Price, est, maxOut int64) accounting.Vector {
	return accounting.Vector{Steps: 1, Tokens: est + maxOut, InputTokens: est, OutputTokens: maxOut,
		Cost: price.WorstCase(est, maxOut)}
}

// fitOutput is the largest output cap, up to maxOut, whose worst case fits
// head with est input tokens; 0 when the input or the step does not fit.
func fitOutput(head accounting.Vector, price accounting.Price, priced bool, est, maxOut int64) int64 {
	if head.InputTokens < est || head.Steps < 1 {
		return 0
	}
	out := min(maxOut, head.OutputTokens, head.Tokens-est)
	if priced && head.Cost != accounting.Money(math.MaxInt64) {
		out = min(out, price.MaxOutputFor(head.Cost, est))
	}
	return max(out, 0)
}

// headroomReserver is a book that reads the headroom left on the ledgers in
// the round trip of a reservation (redisbook.Book), as headroomSettler
// does for a settlement: a streamed call's budget header, sent before its
// settlement, then costs no round trip before its first byte. (A call
// answered whole leaves it: its headers follow the settlement's read.)
type headroomReserver interface {
	ReserveHeadroom(ctx context.Context, keys []string, want accounting.Vector, useFinalReserve bool, lease time.Duration, now time.Time,
		headFinalReserve bool) (h *accounting.Hold, short *accounting.Shortfall, head accounting.Vector, read bool, err error)
}

// runLedger is the run's own ledger's spent and reserved amounts before
// this call reserves: as the run's lock read them (RunLockReader), or from
// the book.
func (p *Pipeline) runLedger(ctx context.Context, t *Turn, g *governance, now time.Time) (spent, reserved accounting.Vector, err error) {
	if l := t.ledgerAtLock; l != nil && g.ledger == runLedgerPrefix+t.run.ID {
		return l.Spent, l.Reserved, nil
	}
	if err := p.makeLedgers(ctx, t); err != nil {
		return spent, reserved, err
	}
	_, spent, reserved, err = p.book.Snapshot(ctx, g.ledger, now)
	return spent, reserved, err
}

// makeLedgers makes the ledgers govern left to the call's reservation
// (Turn.ahead) before a use of the book that does not make them itself:
// the book ignores a ledger it does not know, so none may be read or
// reserved on before it is made.
func (p *Pipeline) makeLedgers(ctx context.Context, t *Turn) error {
	if t.ahead == nil {
		return nil
	}
	if err := p.book.Ensure(ctx, t.ahead, p.now()); err != nil {
		return err
	}
	t.ahead = nil
	return nil
}

// makeLedgersLeft makes the ledgers govern left to a reservation that did
// not make them: the call was answered before it reserved, or its
// reservation failed (a forwarded call's did make them). Failing that,
// the run is left ungoverned, as when govern fails, so that its next call
// governs it and makes them; this call is refused.
func (p *Pipeline) makeLedgersLeft(ctx context.Context, t *Turn, r *runstate.Run) {
	if err := p.makeLedgers(ctx, t); err != nil {
		r.Ext = nil
		p.unavailable(t, err)
	}
}

// softLine returns the line whose soft wrap-up fraction is reached on any
// ledger, or "".
func (p *Pipeline) softLine(ctx context.Context, t *Turn, g *governance, frac float64, now time.Time) (string, error) {
	if frac <= 0 || !g.budgeted {
		return "", nil
	}
	if err := p.makeLedgers(ctx, t); err != nil {
		return "", err
	}
	for _, key := range g.ledgers {
		lim, spent, _, err := p.book.Snapshot(ctx, key, now)
		if err != nil {
			return "", err
		}
		over := func(s, m int64) bool { return m > 0 && float64(s) >= frac*float64(m) }
		if over(int64(spent.Cost), int64(lim.Cost)) {
			return runstate.ReasonCostBudget, nil
		}
		if over(spent.Tokens, lim.Tokens) || over(spent.InputTokens, lim.InputTokens) || over(spent.OutputTokens, lim.OutputTokens) {
			return runstate.ReasonTokenBudget, nil
		}
	}
	return "", nil
}

// shortfallDetail says which budget a refused call did not fit, naming the
// ledger as the agent knows it (never its internal key).
func shortfallDetail(g *governance, s *accounting.Shortfall) string {
	which := "a parent run's budget"
	switch {
	case s.Ledger == g.ledger:
		which = "the run's budget"
	case strings.HasPrefix(s.Ledger, teamLedgerPrefix):
		which = "the team window " + strings.TrimPrefix(s.Ledger, teamLedgerPrefix)
	}
	need, left := strconv.FormatInt(s.Need, 10), strconv.FormatInt(s.Left, 10)
	if s.Dimension == accounting.DimCost {
		need, left = accounting.Money(s.Need).String()+" USD", accounting.Money(s.Left).String()+" USD"
	}
	return fmt.Sprintf("this call needs %s %s of %s, %s left", need, strings.ReplaceAll(s.Dimension, "_", " "), which, left)
}

func shortfallLine(s *accounting.Shortfall) string {
	switch s.Dimension {
	case "cost":
		return runstate.ReasonCostBudget
	case "steps":
		return runstate.ReasonMaxSteps
	case "tool_calls":
		return runstate.ReasonToolQuota
	}
	return runstate.ReasonTokenBudget
}

// forward prepares the upstream body and moves the run to deciding.
func (p *Pipeline) forward(ctx context.Context, t *Turn, g *governance, now time.Time) {
	r := t.run
	body := p.rewriteContext(ctx, t, g, now)
	var err error
	if t.wrapUp {
		t.UpstreamBody, err = t.codec.WrapUp(body, &t.Req, WrapUpInstruction, t.wrapOut)
		r.Record(now, runstate.Event{Type: runstate.EventWrapUp, Detail: t.wrapLine})
	} else {
		var capOut int64
		if g.budgeted && (t.Req.MaxOutputTokens == 0 || t.Req.MaxOutputTokens > t.reserved.OutputTokens) {
			capOut = t.reserved.OutputTokens
		}
		t.Req.SerialTools = p.serialTools(ctx, t, g, now)
		t.UpstreamBody, err = t.codec.PrepareUpstream(body, &t.Req, capOut)
		if err == nil && p.offersReadTool(t, g) {
			t.UpstreamBody, t.readOffer = offerReadTool(t.codec, t.UpstreamBody)
		}
	}
	if err != nil {
		p.release(t, g)
		t.res = nil
		t.Answer = errorAnswer(t.codec, wire.ErrInvalidRequest, "cannot prepare request: "+err.Error(), nil)
		return
	}
	r.Counters.ModelCalls++
	r.Inflight++
	r.Transition(runstate.Deciding, now, "")
	callCtx, cancel := context.WithCancel(context.Background())
	t.Ctx, t.cancel = callCtx, cancel
	t.unreg = r.AddCancel(cancel)
}

func joinReasons(rs []string) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += "; "
		}
		s += r
	}
	return s
}

// shadowBudgets checks the budget lines that run in shadow mode — their
// limits are left out of the run's ledger, so nothing refuses — and records
// a hit where enforcing them would have wrapped the run up: the soft line
// reached, or this call's worst case at its lowest output cap (least) not
// fitting the working budget.
func (p *Pipeline) shadowBudgets(ctx context.Context, t *Turn, g *governance, least accounting.Vector, now time.Time) error {
	lim := g.limits
	tokShadow := g.term.EnforcementOf(runstate.ReasonTokenBudget) == policy.Shadow && lim.MaxTokens > 0
	costShadow := g.term.EnforcementOf(runstate.ReasonCostBudget) == policy.Shadow && lim.MaxCostUSD > 0
	if !tokShadow && !costShadow {
		return nil
	}
	spent, reserved, err := p.runLedger(ctx, t, g, now)
	if err != nil {
		return err
	}
	exceeds := func(spentV, reservedV, wantV, limit int64) bool {
		working := limit - int64(float64(limit)*lim.FinalReserve)
		return float64(spentV) >= lim.SoftWrapUp*float64(limit) || spentV+reservedV+wantV > working
	}
	if tokShadow && exceeds(spent.Tokens, reserved.Tokens, least.Tokens, lim.MaxTokens) {
		p.shadow(t.run, runstate.Termination{Reason: runstate.ReasonTokenBudget,
			Detail: fmt.Sprintf("%d of %d tokens used: wrap-up", spent.Tokens, lim.MaxTokens)}, t.step, now)
	}
	if maxCost := accounting.USD(lim.MaxCostUSD); costShadow && exceeds(int64(spent.Cost), int64(reserved.Cost), int64(least.Cost), int64(maxCost)) {
		p.shadow(t.run, runstate.Termination{Reason: runstate.ReasonCostBudget,
			Detail: fmt.Sprintf("%s of %s USD spent: wrap-up", spent.Cost, maxCost)}, t.step, now)
	}
	return nil
}
