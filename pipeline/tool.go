package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire/mcp"
)

// Tool calls go through the same kind of two steps as model calls:
//
//	BeginTool  → attribute run → registry → schema → level (approval) → idempotency → quotas → forward
//	FinishTool → cut long output → store for idempotency → loop guard → record   (exactly once)
//
// The front end forwards between the two with the turn's timeout and
// deadline header, and renders answers in its own wire format (MCP result,
// JSON-RPC error, HTTP status).

// ToolCall is one tool call as a front end received it.
type ToolCall struct {
	// Server is the MCP server name; "" for a plain HTTP tool.
	Server string
	Name   string
	// Arguments are the call's arguments as JSON (read-only).
	Arguments []byte
	// Run headers (docs/design.md §3), as sent.
	RunID, SessionID, AgentID, ParentRunID, TaskType, RunBudget string
	Principal                                                   Principal
	// Timeout is the configured bound of the tool call; 0 uses the
	// pipeline's upstream timeout.
	Timeout time.Duration
}

// ToolAnswerKind says why the gateway answers a tool call itself.
type ToolAnswerKind int

// Tool answer kinds.
const (
	ToolDenied         ToolAnswerKind = iota + 1 // policy refused the call
	ToolSchemaError                              // arguments do not match the input schema
	ToolPending                                  // held for a human approval
	ToolApprovalDenied                           // a human refused it
	ToolReplayed                                 // idempotent repeat: the stored result
	ToolRunEnded                                 // the run has ended
	ToolBusy                                     // the identical call is executing now
	ToolUnavailable                              // policy or budget store unavailable
	ToolBadRequest                               // bad run headers
)

// ToolAnswer is the gateway's own answer to a tool call: the call was not
// forwarded.
type ToolAnswer struct {
	Kind ToolAnswerKind
	// Status is the HTTP status an HTTP tool route answers with.
	Status int
	// Message is a sentence for the agent (and the model), naming the reason.
	Message string
	Reason  string
	// Approval is the ticket of a pending or refused call.
	Approval *Approval
	// Schema is the tool's input schema on a schema error.
	Schema json.RawMessage
	// Stored is the earlier result of an idempotent repeat.
	Stored *StoredResult
	// Termination is the run's termination reason when it has ended.
	Termination string
}

// StoredResult is a tool result as the agent received it, kept for
// idempotent repeats. For MCP, Body is the JSON-RPC result object; for an
// HTTP tool, the response body.
type StoredResult struct {
	Status      int             `json:"status"`
	ContentType string          `json:"content_type,omitempty"`
	Body        json.RawMessage `json:"body"`
	// Handle names the full text when the output was cut.
	Handle string `json:"handle,omitempty"`
	At     string `json:"at"`
}

// ToolOutcome is what the tool answered, reported to FinishTool.
type ToolOutcome struct {
	// Err is set when no usable answer came (timeout, reset, garbage).
	Err error
	// IsError is true when the tool reported a failure (MCP isError, HTTP
	// status ≥ 400): such a result is not stored for repeats.
	IsError bool
	// Text is the whole output text: what the loop guard hashes and the
	// cut applies to.
	Text string
	// Render builds the agent's answer around a text (the output, or its
	// cut form). It runs under the run's lock: it must not block.
	Render func(text string) StoredResult
}

// ToolTurn is one tool call's passage through the pipeline.
type ToolTurn struct {
	Call *ToolCall
	// Answer, when set by BeginTool, is given instead of forwarding.
	Answer *ToolAnswer
	// Timeout bounds the forwarded call: min(configured, run's remaining time).
	Timeout time.Duration
	// DeadlineMs is the run's remaining time for X-Run-Deadline-Ms; 0 when
	// the run has no deadline.
	DeadlineMs int64
	// Ctx is cancelled when the run is cancelled.
	Ctx context.Context

	run      *runstate.Run
	server   string
	fp       string
	key      string
	callID   string
	idem     bool
	level    string
	hold     *accounting.Hold
	cost     accounting.Money
	cancel   context.CancelFunc
	unreg    func()
	started  time.Time
	finished bool
	// wait and done are the call's place in the run's serial queue.
	wait <-chan struct{}
	done chan struct{}
	// committing is BeginTool's commit, made behind the forwarded call,
	// for FinishTool to land; none otherwise.
	committing runtx.Pending
}

// RunID is the name of the run the call was attributed to.
func (tt *ToolTurn) RunID() string {
	if tt.run == nil {
		return ""
	}
	return runstate.NameOf(tt.run.ID)
}

// Level is the danger level policy gave the call.
func (tt *ToolTurn) Level() string { return tt.level }

// BeginTool runs the gates for one tool call. It never fails: a refusal is
// an Answer on the turn. FinishTool must follow every BeginTool that left
// Answer nil. An L1/L2 call returns once the run's L1/L2 calls that passed
// the gates before it have finished (serialQueue), or the run is cancelled.
func (p *Pipeline) BeginTool(ctx context.Context, call *ToolCall) *ToolTurn {
	tt := p.beginTool(ctx, call)
	if tt.Answer == nil && tt.wait != nil {
		start := p.now()
		select {
		case <-tt.wait:
		case <-tt.Ctx.Done():
		case <-ctx.Done():
		}
		if tt.DeadlineMs > 0 {
			// The run's clock ran while the call waited its turn.
			left := time.Duration(tt.DeadlineMs)*time.Millisecond - p.now().Sub(start)
			tt.Timeout = max(min(tt.Timeout, left), time.Nanosecond)
			tt.DeadlineMs = max(left.Milliseconds(), 1)
		}
	}
	return tt
}

func (p *Pipeline) beginTool(ctx context.Context, call *ToolCall) *ToolTurn {
	tt := &ToolTurn{Call: call, started: p.now(), server: call.Server}
	if err := checkRunNames(call.RunID, call.ParentRunID, call.SessionID); err != nil {
		tt.Answer = &ToolAnswer{Kind: ToolBadRequest, Status: 400, Message: err.Error(), Reason: "bad_request"}
		return tt
	}
	r, created, err := p.attributeTool(ctx, call)
	if err != nil {
		tt.Answer = unavailableTool("run store unavailable, retry later")
		return tt
	}
	tt.run = r
	// lock: the run's transaction, up to date with the store
	tx, err := p.tx.Open(ctx, r, runtx.Need{})
	if err != nil {
		msg := "run lock unavailable, retry later"
		if runtx.IsStale(err) {
			msg = "run store unavailable, retry later"
		}
		tt.Answer = unavailableTool(msg)
		return tt
	}
	// govern and the gates
	p.beginToolLocked(ctx, tt, r, created)
	// commit: as a model call's (Begin), a forwarded call's goes on behind
	// it when replicas share the store, and FinishTool lands it before
	// taking the lock again; a ticket or a refusal is committed before the
	// agent hears of it.
	mode := runtx.Wait
	if tt.Answer == nil && p.shared() {
		mode = runtx.Behind
	}
	tt.committing = tx.Commit(mode).Landed()
	return tt
}

func unavailableTool(msg string) *ToolAnswer {
	return &ToolAnswer{Kind: ToolUnavailable, Status: 503, Message: msg, Reason: "unavailable"}
}

func (p *Pipeline) beginToolLocked(ctx context.Context, tt *ToolTurn, r *runstate.Run, created bool) {
	now := p.now()
	call := tt.Call
	if r.Ext == nil {
		g, _, _, err := p.govern(ctx, r, &Call{RunID: call.RunID, SessionID: call.SessionID, AgentID: call.AgentID,
			ParentRunID: call.ParentRunID, TaskType: call.TaskType, RunBudget: call.RunBudget, Principal: call.Principal}, false)
		if err != nil {
			var bad badRequest
			if errors.As(err, &bad) {
				tt.Answer = &ToolAnswer{Kind: ToolBadRequest, Status: 400, Message: err.Error(), Reason: "bad_request"}
				return
			}
			var missing notFound
			if errors.As(err, &missing) {
				tt.Answer = &ToolAnswer{Kind: ToolBadRequest, Status: 404, Message: err.Error(), Reason: "parent_not_found"}
				return
			}
			p.log.Error("run governance failed", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
			tt.Answer = unavailableTool("policy unavailable")
			return
		}
		r.Ext = g
		if created {
			r.Record(now, runstate.Event{Type: runstate.EventTransition, To: runstate.Ready, Detail: "run started by a tool call"})
			p.obs.RunStarted()
		}
	}
	g := govOf(r)
	ts := g.toolState()
	fp := g.canon.Fingerprint(r.AgentID, call.Name, call.Arguments).String()
	tt.fp = fp
	tt.key = toolKey(call.Server, call.Name, fp)
	tt.callID = outstandingID(r, call.Name, fp)
	if r.State == runstate.Completed && call.RunID != "" {
		r.Reopen(now) // the agent names its run and goes on
	}
	if !r.State.Final() && r.ParentID != "" {
		if term := p.endedAncestor(r); term != nil {
			p.terminate(r, g, *term, runstate.Cancelled, now)
		}
	}
	if r.State.Final() {
		tt.Answer = p.endedTool(r)
		return
	}
	r.LastAction = &runstate.Action{Tool: call.Name, ArgumentsHash: fp}
	lim := g.limits
	if lim.DeadlineMs > 0 && r.Remaining(now) <= 0 {
		if p.toolLine(r, g, runstate.Termination{Reason: runstate.ReasonDeadline,
			Detail: fmt.Sprintf("deadline of %d ms passed", lim.DeadlineMs)}, now) {
			tt.Answer = p.endedTool(r)
			return
		}
	}

	// Gate 1: the registry (config levels, learned schemas and hints).
	entry := p.ToolRegistry().lookup(call.Server, call.Name)
	// Gate 2: the schema; the error carries it so the model can fix itself.
	if len(entry.Schema) > 0 {
		if err := mcp.CheckArguments(entry.Schema, call.Arguments); err != nil {
			r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: call.Name, ArgumentsHash: fp, Status: 400,
				Detail: "schema error"})
			tt.Answer = &ToolAnswer{Kind: ToolSchemaError, Status: 400, Reason: "schema_error", Schema: entry.Schema,
				Message: fmt.Sprintf("tool call %s refused: %s. The tool's input schema is: %s", call.Name, err, entry.Schema)}
			return
		}
	}
	// Gate 3: policy and the danger level.
	d, err := p.toolDecision(ctx, r, call, entry, fp, now)
	if err != nil {
		p.log.Error("tool policy failed", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "tool", call.Name, "err", err)
		tt.Answer = unavailableTool("policy unavailable")
		return
	}
	tt.level = d.Level
	if !d.Allow {
		r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: call.Name, ArgumentsHash: fp, Status: 403,
			Detail: "denied: " + d.Reason})
		tt.Answer = &ToolAnswer{Kind: ToolDenied, Status: 403, Reason: d.Reason,
			Message: fmt.Sprintf("tool call %s denied by policy: %s", call.Name, d.Reason)}
		return
	}
	tt.idem = d.Approval || d.Level == policy.LevelReversible || d.Level == policy.LevelIrreversible
	// Gate 4: idempotency, before the approval: a stored result is replayed
	// without asking anyone again, and nothing executes twice.
	if tt.idem {
		if res, ok := ts.idem[tt.key]; ok {
			r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: call.Name, ArgumentsHash: fp, Status: res.Status,
				Detail: "idempotent repeat: stored result"})
			stored := *res
			tt.Answer = &ToolAnswer{Kind: ToolReplayed, Status: res.Status, Stored: &stored, Reason: "idempotent_repeat"}
			return
		}
		if ts.inflight[tt.key] {
			tt.Answer = &ToolAnswer{Kind: ToolBusy, Status: 409, Reason: "in_progress",
				Message: fmt.Sprintf("an identical %s call of this run is executing; retry for its result", call.Name)}
			return
		}
	}
	if d.Approval {
		if a := p.approvalGate(tt, r, g, ts, d, now); a != nil {
			tt.Answer = a
			return
		}
	}
	// Quotas: tool calls of the run, per-tool quota, per-call cost.
	if tt.callID == "" {
		r.Counters.ToolCalls++ // a call no model response announced
	}
	if lim.MaxToolCalls > 0 && r.Counters.ToolCalls > lim.MaxToolCalls {
		if p.toolLine(r, g, runstate.Termination{Reason: runstate.ReasonToolQuota,
			Detail: fmt.Sprintf("%d tool calls of %d allowed", r.Counters.ToolCalls, lim.MaxToolCalls)}, now) {
			tt.Answer = p.endedTool(r)
			return
		}
	}
	if q, ok := lim.ToolQuotas[call.Name]; ok && ts.Uses[call.Name] >= q {
		if p.toolLine(r, g, runstate.Termination{Reason: runstate.ReasonToolQuota,
			Detail: fmt.Sprintf("%s used %d of %d times allowed", call.Name, ts.Uses[call.Name], q)}, now) {
			tt.Answer = p.endedTool(r)
			return
		}
	}
	if entry.CostUSD > 0 {
		tt.cost = accounting.USD(entry.CostUSD)
		res, short, err := p.book.Reserve(ctx, g.ledgers, accounting.Vector{Cost: tt.cost}, false, p.opts.Lease, now)
		if err != nil {
			p.log.Error("ledger book unavailable", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
			tt.Answer = unavailableTool("budget store unavailable, retry later")
			return
		}
		if short != nil {
			if p.toolLine(r, g, runstate.Termination{Reason: shortfallLine(short),
				Detail: fmt.Sprintf("no budget left for %s (%s USD a call)", call.Name, tt.cost)}, now) {
				tt.Answer = p.endedTool(r)
				return
			}
		} else {
			tt.hold = res
		}
	}
	p.forwardTool(tt, r, g, ts, now)
}

// forwardTool counts the attempt and sets the call's time bounds.
func (p *Pipeline) forwardTool(tt *ToolTurn, r *runstate.Run, g *governance, ts *toolState, now time.Time) {
	call := tt.Call
	if tt.idem {
		ts.inflight[tt.key] = true
	}
	if (tt.level == policy.LevelReversible || tt.level == policy.LevelIrreversible) && !g.limits.ParallelSideEffects {
		tt.wait, tt.done = ts.serial.take()
	}
	ts.Uses[call.Name]++
	r.Counters.ToolAttempts++
	r.Inflight++
	if r.State == runstate.Paused && ts.pendingCount(now) == 0 {
		p.leavePause(r, g, ts, now)
	}
	r.Transition(runstate.ExecutingTools, now, "tool call "+call.Name)
	r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: call.Name, ArgumentsHash: tt.fp,
		Detail: "forwarded (" + tt.level + ")"})
	tt.Timeout = call.Timeout
	if tt.Timeout <= 0 {
		tt.Timeout = p.opts.UpstreamTimeout
	}
	if g.limits.DeadlineMs > 0 {
		left := r.Remaining(now)
		tt.Timeout = min(tt.Timeout, left)
		tt.DeadlineMs = max(left.Milliseconds(), 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tt.Ctx, tt.cancel = ctx, cancel
	tt.unreg = r.AddCancel(cancel)
}

// FinishTool records what the tool answered and returns what the agent
// gets: the rendered result, with long output cut (the full text kept
// behind a handle). It runs once per forwarded BeginTool.
func (p *Pipeline) FinishTool(ctx context.Context, tt *ToolTurn, out ToolOutcome) StoredResult {
	if tt.finished || tt.run == nil || tt.Answer != nil {
		return StoredResult{}
	}
	tt.finished = true
	if tt.done != nil {
		close(tt.done) // the run's next L1/L2 call may go
	}
	if tt.cancel != nil {
		tt.cancel()
	}
	r := tt.run
	ctx = context.WithoutCancel(ctx)
	// lock: BeginTool's commit landed first (the lock is BeginTool's until
	// then); the run is caught up with the store, where another replica
	// may have moved it while the tool ran (a refresh finds the run as
	// this replica wrote it most often, and costs nothing: the lock read
	// its snapshot)
	tt.committing.Land()
	tx, err := p.tx.Open(ctx, r, runtx.Need{GoOn: true})
	p.settlingOpen(r, err)
	// settle, cut, store, observe
	res := p.finishToolLocked(ctx, tt, out)
	// commit: the result leaves only once it is stored, where a repeat
	// must find it (with the run's lock let go in the same commit, when it
	// can be).
	c := tx.Commit(runtx.Wait)
	if tt.unreg != nil {
		tt.unreg()
	}
	c.Land()
	return res
}

func (p *Pipeline) finishToolLocked(ctx context.Context, tt *ToolTurn, out ToolOutcome) StoredResult {
	r, g := tt.run, govOf(tt.run)
	now := p.now()
	ts := g.toolState()
	r.Inflight--
	delete(ts.inflight, tt.key)
	if tt.hold != nil {
		if out.Err != nil {
			_ = p.book.Release(ctx, tt.hold)
		} else if err := p.book.Settle(ctx, tt.hold, accounting.Vector{Cost: tt.cost}, now); err != nil {
			p.log.Error("settlement deferred: ledger book unavailable", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
			p.deferSettle(tt.hold, accounting.Vector{Cost: tt.cost}, now)
		}
		if out.Err == nil {
			r.Counters.ActualCost += int64(tt.cost)
			r.Counters.EstimatedCost += int64(tt.cost)
		}
	}
	if out.Err != nil {
		r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: tt.Call.Name, ArgumentsHash: tt.fp,
			Status: 502, Detail: "tool failed: " + toolErrClass(out.Err)})
		return StoredResult{}
	}
	text, handle := out.Text, ""
	if cutNeeded(text) {
		handle = p.keepBlob(r, g, ts, text, now)
		text = cutText(text, handle, p.blobURL(r.ID, handle))
	}
	var res StoredResult
	if out.Render != nil {
		res = out.Render(text)
	}
	res.Handle = handle
	res.At = now.UTC().Format(time.RFC3339Nano)
	if tt.idem && !out.IsError {
		stored := res
		ts.idem[tt.key] = &stored
		p.queueIdem(r.ID, g, tt.key, &stored)
	}
	status := res.Status
	if status == 0 {
		status = 200
	}
	detail := "result"
	if out.IsError {
		detail = "error result"
	}
	if handle != "" {
		detail += ", cut: handle " + handle
	}
	r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: tt.Call.Name, ArgumentsHash: tt.fp,
		Status: status, Detail: detail})
	// The result is the observation of the call: the loop guard sees it
	// here, and again (as nothing new) when the agent echoes it to the model.
	callID := tt.callID
	if callID == "" {
		callID = "tool:" + tt.key
	}
	if v := g.guard.Observe(callID, g.canon.Observation([]byte(out.Text))); v != nil {
		p.toolVerdict(r, g, runstate.Termination{Reason: v.Reason, Detector: v.Detector, Step: int64(v.Step),
			Evidence: v.Fingerprints, Detail: v.Detail}, v.Detector, now)
	}
	return res
}

// toolDecision asks haltline.tool.
func (p *Pipeline) toolDecision(ctx context.Context, r *runstate.Run, call *ToolCall, e ToolEntry, fp string, now time.Time) (policy.ToolDecision, error) {
	if p.pol == nil {
		level := e.Level
		if level == "" {
			level = policy.LevelReversible
		}
		return policy.ToolDecision{Allow: true, Approval: level == policy.LevelIrreversible, Level: level}, nil
	}
	in := policy.ToolInput{RunInput: runInput(r, call.Principal, now), Tool: policy.ToolInfo{
		Name: call.Name, Server: call.Server, Level: e.Level, Hints: e.Hints,
		Arguments: call.Arguments, Fingerprint: fp}}
	return p.pol.Tool(ctx, in)
}

// toolLine applies a termination line at the tool route: shadowed, it is
// recorded and the call goes on (false); enforced, the run ends (true).
func (p *Pipeline) toolLine(r *runstate.Run, g *governance, term runstate.Termination, now time.Time) bool {
	if g.term.EnforcementOf(term.Reason) == policy.Shadow {
		p.shadow(r, term, 0, now)
		return false
	}
	p.terminate(r, g, term, runstate.Terminated, now)
	return true
}

// toolVerdict applies a loop or stall verdict found on a tool result: the
// run ends now, and its next call is answered with the end.
func (p *Pipeline) toolVerdict(r *runstate.Run, g *governance, term runstate.Termination, detector string, now time.Time) {
	r.Counters.LoopHits++
	mode := g.term.EnforcementOf(term.Reason)
	p.obs.LoopDetection(detector, mode)
	if mode == policy.Shadow {
		p.shadow(r, term, term.Step, now)
		return
	}
	p.terminate(r, g, term, runstate.Terminated, now)
}

// endedTool answers a call on an ended run.
func (p *Pipeline) endedTool(r *runstate.Run) *ToolAnswer {
	reason, detail := runstate.ReasonCompleted, "the run has completed"
	if t := r.Termination; t != nil {
		reason, detail = t.Reason, t.Detail
	}
	status := 409
	switch reason {
	case runstate.ReasonPolicyDenied, runstate.ReasonApprovalDenied:
		status = 403
	case runstate.ReasonDeadline:
		status = 504
	case runstate.ReasonMaxSteps, runstate.ReasonTokenBudget, runstate.ReasonCostBudget, runstate.ReasonToolQuota,
		runstate.ReasonLoopDetected, runstate.ReasonStalled:
		status = 429
	}
	return &ToolAnswer{Kind: ToolRunEnded, Status: status, Reason: reason, Termination: reason,
		Message: fmt.Sprintf("run %s has ended (%s: %s); the tool call was not executed", runstate.NameOf(r.ID), reason, detail)}
}

// ToolHeaders calls set for each X-Run-* response header of a tool call.
func (p *Pipeline) ToolHeaders(tt *ToolTurn, set func(name, value string)) {
	if tt.run == nil {
		return
	}
	p.Headers(&Turn{run: tt.run}, set)
}

// outstandingID returns the id of the run's outstanding model tool call
// with this name and fingerprint, or "".
func outstandingID(r *runstate.Run, name, fp string) string {
	for id, oc := range r.Outstanding {
		if oc.Name == name && oc.Fingerprint == fp {
			return id
		}
	}
	return ""
}

func toolKey(server, name, fp string) string { return server + "/" + name + "\x00" + fp }

// toolErrClass names a tool failure for the event log without its text:
// transport errors quote URLs, whose queries may hold the call's arguments.
func toolErrClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	var se interface{ Timeout() bool }
	if errors.As(err, &se) && se.Timeout() {
		return "timed out"
	}
	return "no usable answer"
}
