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

// The gateway's header names (docs/design.md §3), for both front ends.
// HeaderRunID names the run on a request and on every answer alike.
const (
	HeaderRunID = "X-Run-Id"

	// On a request: the agent's, read by ReadHeaders; none goes upstream
	// (IsRunHeader).
	HeaderSessionID   = "X-Session-Id"
	HeaderAgentID     = "X-Agent-Id"
	HeaderParentRunID = "X-Parent-Run-Id"
	HeaderTaskType    = "X-Task-Type"
	HeaderRunBudget   = "X-Run-Budget"

	// On an answer: the run as it stands (Headers).
	HeaderRunState        = "X-Run-State"
	HeaderRunStep         = "X-Run-Step"
	HeaderBudgetRemaining = "X-Run-Budget-Remaining"
	HeaderTermination     = "X-Run-Termination"

	// HeaderRunDeadline carries the run's remaining time to a tool.
	HeaderRunDeadline = "X-Run-Deadline-Ms"
	// HeaderShouldRetry: false tells the official SDKs not to retry a
	// refusal (Answer.NoRetry).
	HeaderShouldRetry = "x-should-retry"
)

// runHeaderPrefix starts every header of the run's own (X-Run-*).
const runHeaderPrefix = "x-run-"

// requestKeys are the request's run headers in lower case, as HTTP/2 and
// Envoy spell them, in the order ReadHeaders reads them.
var requestKeys = func() (k [6]string) {
	for i, name := range [...]string{HeaderRunID, HeaderSessionID, HeaderAgentID, HeaderParentRunID, HeaderTaskType, HeaderRunBudget} {
		k[i] = strings.ToLower(name)
	}
	return k
}()

// ReadHeaders sets the call's run headers from get, which is given each
// name in lower case and must match it in any case (fasthttp's Peek does).
func (c *Call) ReadHeaders(get func(name string) string) {
	readRunHeaders(get, &c.RunID, &c.SessionID, &c.AgentID, &c.ParentRunID, &c.TaskType, &c.RunBudget)
}

// ReadHeaders sets the tool call's run headers from get, as Call.ReadHeaders.
func (c *ToolCall) ReadHeaders(get func(name string) string) {
	readRunHeaders(get, &c.RunID, &c.SessionID, &c.AgentID, &c.ParentRunID, &c.TaskType, &c.RunBudget)
}

func readRunHeaders(get func(string) string, dst ...*string) {
	for i, d := range dst {
		*d = get(requestKeys[i])
	}
}

// IsRunHeader reports whether a request header (name in any case) is the
// gateway's: X-Run-* or another of the run headers. The agent's never go
// upstream.
func IsRunHeader(name string) bool {
	if HasRunPrefix(name) {
		return true
	}
	for _, k := range requestKeys[1:] {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

// HasRunPrefix reports whether name (any case) is an X-Run-* header: on an
// upstream's answer, one the client must get from the gateway only.
func HasRunPrefix(name string) bool {
	return len(name) >= len(runHeaderPrefix) && strings.EqualFold(name[:len(runHeaderPrefix)], runHeaderPrefix)
}

// AnswerHeaders calls set for the headers of an answer of the gateway's
// own: its content type and, for a refusal not to retry, x-should-retry.
func AnswerHeaders(a *Answer, set func(name, value string)) {
	set("Content-Type", a.ContentType)
	if a.NoRetry {
		set(HeaderShouldRetry, "false")
	}
}

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
