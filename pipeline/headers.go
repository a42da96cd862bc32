package pipeline

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
)

// Response header names (docs/design.md §3).
const (
	HeaderRunID           = "X-Run-Id"
	HeaderRunState        = "X-Run-State"
	HeaderRunStep         = "X-Run-Step"
	HeaderBudgetRemaining = "X-Run-Budget-Remaining"
	HeaderTermination     = "X-Run-Termination"
)

// Headers calls set for each X-Run-* response header of the turn, as the run
// stands now.
func (p *Pipeline) Headers(t *Turn, set func(name, value string)) {
	r := t.run
	if r == nil {
		return
	}
	r.Lock()
	defer r.Unlock()
	set(HeaderRunID, runstate.NameOf(r.ID))
	state, reason := r.State, ""
	if r.State.Final() && r.Termination != nil {
		reason = r.Termination.Reason
	} else if t.wrapUp {
		// A wrap-up still in flight (a stream's headers go out before it
		// settles) ends the run whatever it answers: the agent learns why
		// and how when the call starts, not from a later call.
		state, reason = runstate.CompletedWithDegradation, t.wrapLine
	}
	set(HeaderRunState, string(state))
	step := t.step
	if step == 0 {
		step = r.Counters.AgentSteps
	}
	set(HeaderRunStep, strconv.FormatInt(step, 10))
	if g := govOf(r); g != nil {
		h, ok := t.headroom, t.headroomRead
		if !ok {
			var err error
			h, err = p.book.Headroom(context.Background(), g.ledgers, true, p.now())
			ok = err == nil
		}
		if ok {
			set(HeaderBudgetRemaining, remaining(g, h, r.Remaining(p.now())))
		}
	}
	if reason != "" {
		set(HeaderTermination, reason)
	}
}

// remaining renders steps=3;tokens=12000;cost_usd=0.21;time_ms=40000 for
// the limited dimensions.
func remaining(g *governance, h accounting.Vector, left time.Duration) string {
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	if h.Steps != math.MaxInt64 {
		add("steps", strconv.FormatInt(max(h.Steps, 0), 10))
	}
	if h.Tokens != math.MaxInt64 {
		add("tokens", strconv.FormatInt(max(h.Tokens, 0), 10))
	}
	if h.Cost != accounting.Money(math.MaxInt64) {
		add("cost_usd", max(h.Cost, 0).String())
	}
	if g.limits.DeadlineMs > 0 {
		add("time_ms", strconv.FormatInt(max(left.Milliseconds(), 0), 10))
	}
	return b.String()
}
