package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// line applies one termination line: in shadow mode the hit is recorded and
// the call proceeds untouched (false); enforced, the run ends (true).
func (p *Pipeline) line(t *Turn, g *governance, term runstate.Termination, now time.Time) bool {
	if g.term.EnforcementOf(term.Reason) == policy.Shadow {
		p.shadow(t.run, term, t.step, now)
		return false
	}
	return p.end(t, g, term, now)
}

// shadow records a line that would have ended the run; each line once.
func (p *Pipeline) shadow(r *runstate.Run, term runstate.Termination, step int64, now time.Time) {
	for _, h := range r.WouldTerminate {
		if h.Line == term.Reason {
			return
		}
	}
	if step == 0 {
		step = r.Counters.AgentSteps
	}
	r.WouldTerminate = append(r.WouldTerminate, runstate.ShadowHit{
		Line: term.Reason, Step: step, Detector: term.Detector,
		Evidence: strings.TrimSpace(term.Detail + " " + strings.Join(term.Evidence, ",")),
		At:       now.UTC().Format(time.RFC3339Nano),
	})
	r.Record(now, runstate.Event{Type: runstate.EventShadow, Detail: term.Reason + ": " + term.Detail})
	if g := govOf(r); g.holding() {
		g.hold(func() { p.obs.Termination(term.Reason, policy.Shadow) })
	} else {
		p.obs.Termination(term.Reason, policy.Shadow)
	}
}

// end ends the run (enforced) and answers the turn with its termination.
func (p *Pipeline) end(t *Turn, g *governance, term runstate.Termination, now time.Time) bool {
	p.terminate(t.run, g, term, runstate.Terminated, now)
	t.Answer = p.endedAnswer(t, g)
	return true
}

// terminate ends a run, and its sub-agent runs after it: done is closed
// when they have ended (nil: it has none). The caller holds r's mutex.
func (p *Pipeline) terminate(r *runstate.Run, g *governance, term runstate.Termination, state runstate.State, now time.Time) (done <-chan struct{}) {
	if term.Reason == runstate.ReasonCancelled {
		state = runstate.Cancelled
	}
	if term.Mode == "" && g != nil {
		term.Mode = g.term.Mode
	}
	if !r.Terminate(state, term, now) {
		return nil
	}
	r.Record(now, runstate.Event{Type: runstate.EventTermination, Detail: term.Reason + ": " + term.Detail})
	if g.holding() {
		g.hold(func() { p.obs.Termination(term.Reason, policy.Enforce) })
	} else {
		p.obs.Termination(term.Reason, policy.Enforce)
	}
	// The observer writes the termination's log line (telemetry's keys).
	p.ended(r, state, *r.Termination, now)
	if g.holding() {
		// Nobody waits for a held end's children (finishGuarded).
		g.hold(func() { p.cascadeOf(r, term) })
		return nil
	}
	return p.cascadeOf(r, term)
}

// loopVerdict turns a loop guard verdict into a termination line. The run
// ends at the next admission check (or, on a response, right away). The
// semantic detector has a line of its own (policy.LineSemanticRepeat): a
// shadow hit names that line, an enforced verdict ends the run with the
// verdict's reason like any loop.
func (p *Pipeline) loopVerdict(t *Turn, g *governance, v *loopguard.Verdict, now time.Time) {
	r := t.run
	r.Counters.LoopHits++
	term := runstate.Termination{Reason: v.Reason, Detector: v.Detector, Step: int64(v.Step),
		Evidence: v.Fingerprints, Detail: v.Detail}
	line := v.Reason
	if v.Detector == loopguard.DetectorSemantic {
		line = policy.LineSemanticRepeat
	}
	mode := g.term.EnforcementOf(line)
	if g.holding() {
		g.hold(func() { p.obs.LoopDetection(v.Detector, mode) })
	} else {
		p.obs.LoopDetection(v.Detector, mode)
	}
	if mode == policy.Shadow {
		hit := term
		hit.Reason = line
		p.shadow(r, hit, int64(v.Step), now)
		return
	}
	if t.pendingEnd == nil {
		t.pendingEnd = &term
	}
}

// endedAnswer is the answer to a call on an ended run: a synthetic final
// message (finalize) or an error in the provider's format (reject).
func (p *Pipeline) endedAnswer(t *Turn, g *governance) *Answer {
	r := t.run
	term := r.Termination
	if term == nil { // completed normally, yet called again without a new task
		term = &runstate.Termination{Reason: runstate.ReasonCompleted, Detail: "the run has completed"}
	}
	mode := policy.ModeFinalize
	if g != nil && g.term.Mode == policy.ModeReject {
		mode = policy.ModeReject
	}
	if mode == policy.ModeReject {
		rec, _ := json.Marshal(r.Snapshot(p.now()))
		kind := wire.ErrBudget
		switch term.Reason {
		case runstate.ReasonPolicyDenied, runstate.ReasonApprovalDenied:
			kind = wire.ErrPolicyDenied
		case runstate.ReasonDeadline:
			kind = wire.ErrTimeout
		}
		a := errorAnswer(t.codec, kind, fmt.Sprintf("run %s ended: %s (%s)", runstate.NameOf(r.ID), term.Reason, term.Detail), rec)
		a.NoRetry = true
		return a
	}
	ct, body := t.codec.SyntheticFinal(&t.Req, finalText(r, term))
	return &Answer{Status: 200, ContentType: ct, Body: body}
}

var reasonPhrase = map[string]string{
	runstate.ReasonMaxSteps:       "it reached its step limit",
	runstate.ReasonDeadline:       "it reached its deadline",
	runstate.ReasonTokenBudget:    "it used up its token budget",
	runstate.ReasonCostBudget:     "it used up its cost budget",
	runstate.ReasonToolQuota:      "it used up its tool-call quota",
	runstate.ReasonLoopDetected:   "it was repeating the same actions without progress",
	runstate.ReasonStalled:        "its last steps brought no new information",
	runstate.ReasonPolicyDenied:   "a policy denied the next action",
	runstate.ReasonApprovalDenied: "an approval was denied",
	runstate.ReasonCancelled:      "it was cancelled by an operator",
	runstate.ReasonCompleted:      "it has already completed",
}

// finalText is the template of the gateway's own final answer (no model
// call): what happened, what was found, what is unfinished.
func finalText(r *runstate.Run, term *runstate.Termination) string {
	var b strings.Builder
	phrase := reasonPhrase[term.Reason]
	if phrase == "" {
		phrase = term.Reason
	}
	fmt.Fprintf(&b, "I have to stop here: %s", phrase)
	if term.Detail != "" {
		fmt.Fprintf(&b, " (%s)", term.Detail)
	}
	b.WriteString(".\n\n")
	if r.Partial != "" {
		b.WriteString("What I found so far:\n")
		b.WriteString(r.Partial)
		b.WriteString("\n\n")
	}
	if r.LastAction != nil {
		fmt.Fprintf(&b, "Last action: %s.\n", r.LastAction.Tool)
	}
	fmt.Fprintf(&b, "Unfinished: the task was not completed within this run's limits (run %s, reason %s).", runstate.NameOf(r.ID), term.Reason)
	return b.String()
}

func errorAnswer(c wire.Codec, kind wire.ErrorKind, msg string, record []byte) *Answer {
	return &Answer{Status: kind.Status(), ContentType: "application/json", Body: c.ErrorBody(kind, msg, record)}
}
