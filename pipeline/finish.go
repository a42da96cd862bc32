package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Finish settles or releases the turn's reservation, runs the loop and stall
// detectors on the response, and records the transition. It runs exactly
// once per Begin (later calls do nothing). For a non-streamed response it
// may return an Answer that replaces the upstream's (the run ended on this
// response, or the upstream failed); a streamed one's held tool calls are
// given out by Turn.Release, unchanged or replaced by the final answer.
func (p *Pipeline) Finish(ctx context.Context, t *Turn, out Outcome) *Answer {
	if t.finished {
		return nil
	}
	t.finished = true
	now := p.now()
	if t.run == nil || t.res == nil {
		// Parse error, or answered by the gateway: nothing reserved.
		t.committing.Land() // the lock, should the commit not carry it
		p.obs.ModelCall(p.callReport(t, answerStatus(t, nil, out), out, now))
		return nil
	}
	// read the response
	cut, resp, booked, rider := p.readOutcome(t, &out, now)
	r := t.run
	ctx = context.WithoutCancel(ctx)
	// lock: Begin's commit landed first (the lock is Begin's until then)
	t.committing.Land()
	// Without the lock on the replica that moved the run last: the
	// settlement and the run's write in one round trip.
	answer, c, guarded := p.finishGuarded(ctx, t, out, cut, &resp, booked, rider, now)
	if !guarded {
		tx, err := p.tx.Open(ctx, r, runtx.Need{Rider: rider, GoOn: true})
		p.settlingOpen(r, err)
		// settle, detect, record
		// A stream's reservation read the headroom its headers showed; what the
		// headers show after Finish is read anew (with the settlement, when the
		// book can), as a released reservation changes it too.
		t.headroomRead = false
		answer = p.finishLocked(ctx, t, out, cut, &resp, booked, rider, now)
		p.recordFinish(t, out, cut, now)
		p.closeReservation(t, govOf(r))
		// commit: the answer leaves only once its settlement is committed to
		// the store (with the run's lock let go in the same commit, when it can
		// be).
		c = tx.Commit(runtx.Wait)
	}
	if t.unreg != nil {
		t.unreg()
	}
	c.Land()
	p.obs.ModelCall(p.callReport(t, answerStatus(t, answer, out), out, p.now()))
	return answer
}

// readOutcome reads what Finish needs before it takes the run's lock:
// whether the stream was cut (Turn.Cut, read before the turn's context is
// cancelled here), and for a 2xx status the provider's response, what its
// settlement books and that settlement ready to ride in the lock's round
// trip (settleAhead).
func (p *Pipeline) readOutcome(t *Turn, out *Outcome, now time.Time) (cut bool, resp wire.Response, booked settlement, rider accounting.Rider) {
	cut = out.Streamed && t.Cut()
	if cut {
		out.Err = cutError(out.Err)
	}
	if t.cancel != nil {
		t.cancel()
	}
	if ok := out.Status >= 200 && out.Status < 300; ok {
		resp = p.response(t, *out)
		booked = settlementOf(t, &resp)
		rider = p.settleAhead(t, booked.actual, now)
	}
	return cut, resp, booked, rider
}

// settlingOpen logs what failed when a call's end opened its run's
// transaction (runtx.Need.GoOn). The call settles anyway: the book is the
// source of truth for money; the run's record catches up at its next
// call.
func (p *Pipeline) settlingOpen(r *runstate.Run, err error) {
	switch {
	case err == nil:
	case runtx.IsStale(err): // the lock's failure too, when both failed
		p.log.Error("run refresh failed at settlement", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
	default:
		p.log.Error("run lock unavailable at settlement", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
	}
}

// callReport is the call as the observer sees it. Only values fixed before
// Finish returns are read, so no lock is needed.
func (p *Pipeline) callReport(t *Turn, status int, out Outcome, end time.Time) CallReport {
	c := CallReport{API: t.Req.API.String(), Provider: t.Req.API.Provider(), Model: t.Req.Model, Status: status,
		Step: t.step, Started: t.started, End: end, Total: end.Sub(t.started), Upstream: out.UpstreamWait,
		FirstByte: out.FirstByte, Usage: t.usage, Cost: t.cost, FinishReason: t.finishReason,
		ToolCalls: t.toolCalls, WrapUp: t.wrapUp, Err: out.Err, Trace: t.trace}
	if r := t.run; r != nil {
		c.RunID, c.SessionID, c.Tenant, c.Team = r.ID, r.SessionID, r.Tenant, r.Team
	}
	return c
}

// answerStatus is the status the agent received.
func answerStatus(t *Turn, replaced *Answer, out Outcome) int {
	switch {
	case replaced != nil:
		return replaced.Status
	case t.Answer != nil:
		return t.Answer.Status
	}
	return out.Status
}

// response is what the provider answered, as far as it can be read.
func (p *Pipeline) response(t *Turn, out Outcome) wire.Response {
	if out.Streamed {
		if t.tap != nil {
			return *t.tap.Response()
		}
		return wire.Response{}
	}
	resp, err := t.codec.ParseResponse(out.Body)
	if err != nil {
		p.log.Warn("unreadable upstream response", "run_id", runstate.NameOf(t.run.ID), "tenant", runstate.TenantOf(t.run.ID), "err", err)
	}
	return resp
}

// finishLocked finishes the call under the run's locks; resp is the
// provider's answer and booked what its settlement books (both read when
// the status is 2xx), rider the settlement when it rode in the lock's
// round trip (settleAhead), cut whether the stream was cut (Turn.Cut).
func (p *Pipeline) finishLocked(ctx context.Context, t *Turn, out Outcome, cut bool, resp *wire.Response, booked settlement, rider accounting.Rider, now time.Time) *Answer {
	r, g := t.run, govOf(t.run)
	r.Inflight--
	if ok := out.Status >= 200 && out.Status < 300; !ok {
		p.release(t, g)
		if r.Inflight == 0 && r.State == runstate.Deciding {
			r.Transition(runstate.Ready, now, "model call failed")
		}
		r.Record(now, runstate.Event{Type: runstate.EventModelCall, Model: t.Req.Model, Status: out.Status,
			Step: t.step, Detail: errDetail(out.Err)})
		if out.Status != 0 {
			return nil // the upstream's own error passes through unchanged
		}
		return p.transportFailure(t, g, out.Err, now)
	}
	complete := resp.HasUsage || resp.FinishReason != ""
	if out.Streamed {
		// A stream is whole once its terminal event was read: usage and
		// a finish reason may come before it (Anthropic's message_start
		// carries usage), and a stream cut or abandoned there is not a
		// step taken.
		complete = t.Done()
	}
	var failure string // the model's error, when the call ended in one
	switch {
	case cut:
		failure = out.Err.Error()
	case resp.ErrorMessage != "":
		failure = resp.ErrorMessage
	}
	p.settle(ctx, t, g, resp, booked, rider, failure, now)
	if failure != "" || !complete {
		// The stream broke off (client gone, cut, upstream error event):
		// the spend is settled, but no decision was taken.
		if r.Inflight == 0 && r.State == runstate.Deciding {
			r.Transition(runstate.Ready, now, "model call incomplete")
		}
		if t.wrapUp && !r.State.Final() {
			p.terminate(r, g, runstate.Termination{Reason: t.wrapLine, Detail: "wrap-up call did not complete"}, runstate.Terminated, now)
		}
		return nil
	}
	if p.readBack(t, resp, now) {
		return nil // a model call of the agent's step, answered by the gateway
	}
	r.Counters.AgentSteps++
	if resp.Text != "" {
		r.Partial = resp.Text
	}
	p.indexResponse(r, &t.Req, resp)
	if len(resp.ToolCalls) > 0 && !t.wrapUp {
		return p.toolStep(t, g, resp, out, now)
	}
	if t.wrapUp {
		p.terminate(r, g, runstate.Termination{Reason: t.wrapLine, Mode: "wrap_up",
			Detail: "wrapped up with a final answer"}, runstate.CompletedWithDegradation, now)
		return nil
	}
	if r.Transition(runstate.Completed, now, "final answer") {
		p.ended(r, runstate.Completed, runstate.Termination{Reason: runstate.ReasonCompleted}, now)
	}
	return nil
}

// headroomSettler is a book that reads the headroom left on the ledgers in
// the round trip of a settlement (redisbook.Book): the call's budget
// header (Headers) then costs no round trip of its own. err is the
// settlement's; read is false when only the headroom could not be read.
type headroomSettler interface {
	SettleHeadroom(ctx context.Context, h *accounting.Hold, actual accounting.Vector, now time.Time,
		keys []string, useFinalReserve bool) (head accounting.Vector, read bool, err error)
}

// settlement is what a call's settlement books: the ledgers' amounts,
// and the usage and cost counted on the run.
type settlement struct {
	actual accounting.Vector
	usage  wire.Usage
	cost   accounting.Money
}

// settlementOf is what the call's settlement books. Without usage (a
// stream cut before its usage arrived) the reservation's worst case is
// booked: the provider bills what it generated, and a budget must never
// be under-counted.
func settlementOf(t *Turn, resp *wire.Response) settlement {
	u := resp.Usage
	var cost accounting.Money
	if resp.HasUsage {
		if t.priced {
			cost = t.price.Cost(t.Req.API.Provider(), u)
		}
	} else {
		u = wire.Usage{InputTokens: t.reserved.InputTokens, OutputTokens: t.reserved.OutputTokens}
		cost = t.reserved.Cost
	}
	actual := accounting.Vector{Steps: 1, Tokens: u.InputTokens + u.OutputTokens, InputTokens: u.InputTokens,
		OutputTokens: u.OutputTokens, ToolCalls: int64(len(resp.ToolCalls)), Cost: cost}
	if asksRead(t, resp) {
		// The gateway's round of the agent's step: neither a step nor
		// calls the agent receives.
		actual.Steps, actual.ToolCalls = 0, 0
	}
	return settlement{actual: actual, usage: u, cost: cost}
}

// settleRiding is a book whose settlement can ride in another request's
// round trip (redisbook.Book: a run lock's, runtx.LockRiding).
type settleRiding interface {
	SettleRider(h *accounting.Hold, actual accounting.Vector, now time.Time, keys []string, useFinalReserve bool) accounting.Rider
}

// settleAhead makes the call's settlement ready to ride in the round
// trip of the run's lock that Finish takes next, when replicas share the
// store and the book and the lock can carry one (else nil: settle books it
// under the lock). The ledgers' names are read under the run's mutex
// (refresh may replace its governance).
func (p *Pipeline) settleAhead(t *Turn, actual accounting.Vector, now time.Time) accounting.Rider {
	sr, ok := p.book.(settleRiding)
	if !ok || !p.shared() || !p.tx.CarriesRider() {
		return nil
	}
	t.run.Lock()
	ledgers := govOf(t.run).ledgers
	t.run.Unlock()
	return sr.SettleRider(t.res, actual, now, ledgers, true)
}

// settle books s (or takes what the rider booked), with the headroom it
// left when the book reads it in the same round trip, and counts it on
// the run; failure, when set, is the model's error the call ended in.
func (p *Pipeline) settle(ctx context.Context, t *Turn, g *governance, resp *wire.Response, s settlement, rider accounting.Rider, failure string, now time.Time) {
	r := t.run
	var err error
	hs, reads := p.book.(headroomSettler)
	switch {
	case t.settleLater: // read once its round trip is back (settled)
	case rider != nil:
		t.headroom, t.headroomRead, err = rider.Result(ctx)
	case reads:
		t.headroom, t.headroomRead, err = hs.SettleHeadroom(ctx, t.res, s.actual, now, g.ledgers, true)
	default:
		err = p.book.Settle(ctx, t.res, s.actual, now)
	}
	u, cost := s.usage, s.cost
	if err != nil {
		p.settleFailed(t, s.actual, now, err)
	}
	if resp.HasUsage && !t.wrapUp {
		// A wrap-up goes without its tools: its count says nothing of
		// the run's next bodies.
		g.calibrate(t.inputEst, u.InputTokens)
	}
	c := &r.Counters
	c.InputTokens += u.InputTokens
	c.OutputTokens += u.OutputTokens
	c.ReasoningTokens += u.ReasoningTokens
	c.CachedTokens += u.CachedTokens
	c.CacheWriteTokens += u.CacheWriteTokens
	c.ActualCost += int64(cost)
	c.EstimatedCost += int64(t.reserved.Cost)
	c.ToolCalls += int64(len(resp.ToolCalls))
	model := resp.Model
	if model == "" {
		model = t.Req.Model
	}
	label := "other" // unpriced names are unbounded: never a label
	if t.priced {
		label = t.Req.Model
	}
	provider := t.Req.API.Provider()
	if g.holding() {
		g.hold(func() { p.obs.Usage(provider, label, u, cost) })
	} else {
		p.obs.Usage(provider, label, u, cost)
	}
	t.usage, t.cost, t.finishReason, t.toolCalls = u, cost, resp.FinishReason, len(resp.ToolCalls)
	ev := runstate.Event{Type: runstate.EventModelCall, Model: model, Status: 200, Step: t.step,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: cost.USD(),
		Detail: resp.FinishReason}
	if failure != "" {
		ev.Error, ev.Detail = runstate.ReasonModelError, failure
	}
	r.Record(now, ev)
}

// settleFailed keeps a settlement the book could not take: the money was
// spent, so it is tried again until the book is back.
func (p *Pipeline) settleFailed(t *Turn, actual accounting.Vector, now time.Time, err error) {
	p.log.Error("settlement deferred: ledger book unavailable", "run_id", runstate.NameOf(t.run.ID), "tenant", runstate.TenantOf(t.run.ID), "err", err)
	p.deferSettle(t.res, actual, now)
}

// toolStep handles a response that asks for tools: the tool gates and the
// loop guard judge its calls, which may end the run on this answer. The
// calls are then delivered (outstanding for attribution, counted) or, when
// the run ended, withheld: a non-streamed answer is replaced by the ended
// answer, a held stream (Turn.Feed) by the final answer in the same
// stream, so a streamed agent stops at the same step as a non-streamed one.
func (p *Pipeline) toolStep(t *Turn, g *governance, resp *wire.Response, out Outcome, now time.Time) *Answer {
	r := t.run
	calls := make([]loopguard.Call, 0, len(resp.ToolCalls))
	prints := make([]callPrints, 0, len(resp.ToolCalls))
	for i, tc := range resp.ToolCalls {
		fp, anyAgent, sk := t.toolFingerprints(g, r.AgentID, i, tc)
		calls = append(calls, loopguard.Call{ID: tc.ID, Tool: tc.Name, FP: fp, Sketch: sk})
		s := fp.String()
		cp := callPrints{agent: s, anyAgent: s}
		if anyAgent != fp {
			cp.anyAgent = anyAgent.String()
		}
		prints = append(prints, cp)
		r.LastAction = &runstate.Action{Tool: tc.Name, ArgumentsHash: s}
	}
	p.governModelToolCalls(t, g, resp, prints, now)
	if v := g.guard.Step(int(r.Counters.AgentSteps), calls); v != nil {
		p.loopVerdict(t, g, v, now)
	}
	// A stream relayed without a hold (no tap) is on the wire already: its
	// calls are delivered, and the run ends at its next call.
	withhold := t.pendingEnd != nil && (!out.Streamed || t.Holding())
	if !withhold {
		p.deliverToolCalls(r, resp, prints, now)
	}
	if t.pendingEnd == nil {
		return nil
	}
	term := *t.pendingEnd
	t.pendingEnd = nil
	if withhold {
		p.withholdToolCalls(t, resp, prints, term, now)
	}
	p.terminate(r, g, term, runstate.Terminated, now)
	if !withhold {
		return nil
	}
	if out.Streamed {
		t.replacement = t.tap.Replace(t.held, finalText(r, r.Termination))
		return nil
	}
	return p.endedAnswer(t, g)
}

// deliverToolCalls records the calls the agent receives: outstanding, for
// the tool routes' attribution, and one event each.
func (p *Pipeline) deliverToolCalls(r *runstate.Run, resp *wire.Response, prints []callPrints, now time.Time) {
	if r.Outstanding == nil {
		r.Outstanding = map[string]runstate.OutstandingCall{}
	}
	for i, tc := range resp.ToolCalls {
		r.Outstanding[tc.ID] = runstate.OutstandingCall{Name: tc.Name, Fingerprint: prints[i].agent}
		r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: tc.Name, ArgumentsHash: prints[i].agent})
	}
	r.Transition(runstate.ExecutingTools, now, strconv.Itoa(len(resp.ToolCalls))+" tool call(s)")
}

// withholdToolCalls takes back the calls of an answer the run ended on:
// tool_calls counts what the agent received, and each withheld call is an
// event of its own that says why.
func (p *Pipeline) withholdToolCalls(t *Turn, resp *wire.Response, prints []callPrints, term runstate.Termination, now time.Time) {
	r := t.run
	r.Counters.ToolCalls -= int64(len(resp.ToolCalls))
	t.toolCalls = 0
	why := term.Reason
	if term.Detector != "" {
		why += " (" + term.Detector + ")"
	}
	if term.Detail != "" {
		why += ": " + term.Detail
	}
	for i, tc := range resp.ToolCalls {
		r.Record(now, runstate.Event{Type: runstate.EventToolWithheld, Tool: tc.Name,
			ArgumentsHash: prints[i].agent, Detail: why})
	}
}

// transportFailure answers a call whose upstream never answered: the run's
// deadline ends the run; anything else is a 502/504 in the provider format.
func (p *Pipeline) transportFailure(t *Turn, g *governance, err error, now time.Time) *Answer {
	r := t.run
	if r.State.Final() { // cancelled or ended while in flight
		return p.endedAnswer(t, g)
	}
	if g.limits.DeadlineMs > 0 && r.Remaining(now) <= time.Duration(float64(g.limits.DeadlineMs)*g.limits.FinalReserve)*time.Millisecond &&
		errors.Is(err, context.DeadlineExceeded) {
		p.line(t, g, runstate.Termination{Reason: runstate.ReasonDeadline,
			Detail: fmt.Sprintf("deadline of %d ms reached while waiting for the model", g.limits.DeadlineMs)}, now)
		if r.State.Final() {
			return p.endedAnswer(t, g)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errorAnswer(t.codec, wire.ErrTimeout, "upstream timed out", nil)
	}
	if errors.Is(err, context.Canceled) {
		return errorAnswer(t.codec, wire.ErrBadGateway, "call cancelled", nil)
	}
	return errorAnswer(t.codec, wire.ErrBadGateway, "upstream unreachable", nil)
}

// cutError is a cut stream's error: what broke its read (a reset, a
// timeout), or ErrStreamCut when it ended in a plain EOF.
func cutError(err error) error {
	if err == nil {
		return ErrStreamCut
	}
	return fmt.Errorf("%s: %w", cutMessage, err)
}

func errDetail(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// release returns the turn's hold unused.
func (p *Pipeline) release(t *Turn, g *governance) {
	if err := p.book.Release(context.Background(), t.res); err != nil {
		// The lease frees it at the latest: a release can wait.
		p.log.Warn("release failed; the lease will free the budget", "run_id", runstate.NameOf(t.run.ID), "tenant", runstate.TenantOf(t.run.ID), "err", err)
	}
	p.closeReservation(t, g)
}

// deferredSettle is a settlement the book could not take yet.
type deferredSettle struct {
	hold   *accounting.Hold
	actual accounting.Vector
	at     time.Time
}

func (p *Pipeline) deferSettle(h *accounting.Hold, actual accounting.Vector, at time.Time) {
	p.deferMu.Lock()
	p.deferred = append(p.deferred, deferredSettle{h, actual, at})
	p.deferMu.Unlock()
}

// retryDeferred replays settlements that failed while the book was down, so
// no spend is lost once it is back.
func (p *Pipeline) retryDeferred(ctx context.Context) {
	p.deferMu.Lock()
	pending := p.deferred
	p.deferred = nil
	p.deferMu.Unlock()
	for i, d := range pending {
		if err := p.book.Settle(ctx, d.hold, d.actual, d.at); err != nil {
			p.deferMu.Lock()
			p.deferred = append(p.deferred, pending[i:]...)
			p.deferMu.Unlock()
			return
		}
	}
}

// Deferred is the number of settlements waiting for the book.
func (p *Pipeline) Deferred() int {
	p.deferMu.Lock()
	defer p.deferMu.Unlock()
	return len(p.deferred)
}
