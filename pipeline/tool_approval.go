package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// Approval ticket states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalUsed     = "used" // approved, and the retried call executed
	ApprovalExpired  = "expired"
)

// Approval is a ticket for a held L2 call (docs/design.md §6). It names the call by
// its fingerprint, never its arguments.
type Approval struct {
	Ticket        string    `json:"ticket"`
	RunID         string    `json:"run_id"`
	Server        string    `json:"server,omitempty"`
	Tool          string    `json:"tool"`
	ArgumentsHash string    `json:"arguments_hash"`
	Level         string    `json:"level"`
	Reason        string    `json:"reason,omitempty"`
	Status        string    `json:"status"`
	Created       time.Time `json:"created"`
	Expires       time.Time `json:"expires"`
	DecidedBy     string    `json:"decided_by,omitempty"`
	DecidedAt     time.Time `json:"decided_at,omitzero"`
	UsedAt        time.Time `json:"used_at,omitzero"`
	// Key is the call's idempotency key (server/tool and fingerprint).
	Key string `json:"call_key"`
	// Tenant is the run's tenant, filled in where an approval is shown
	// (Shown): RunID is then the run's name, as its record shows it.
	Tenant string `json:"tenant,omitempty"`
}

// Shown is the approval as the control plane shows it: the run by name
// and tenant, where the stored approval holds the run's scoped id.
func (a Approval) Shown() Approval {
	a.RunID, a.Tenant = runstate.NameOf(a.RunID), runstate.TenantOf(a.RunID)
	return a
}

// effective is the status as of now: a pending ticket past its time has
// expired.
func (a *Approval) effective(now time.Time) string {
	if a.Status == ApprovalPending && !now.Before(a.Expires) {
		return ApprovalExpired
	}
	return a.Status
}

// Approval errors.
var (
	ErrNoTicket      = errors.New("no such approval ticket")
	ErrTicketClosed  = errors.New("approval ticket is already decided")
	ErrTicketExpired = errors.New("approval ticket has expired")
	ErrBadDecision   = errors.New(`decision must be "approve" or "deny"`)
)

func (ts *toolState) pendingCount(now time.Time) int {
	n := 0
	for _, a := range ts.approvals {
		if a.effective(now) == ApprovalPending {
			n++
		}
	}
	return n
}

// latestTicket is the newest ticket for a call.
func (ts *toolState) latestTicket(key string) *Approval {
	var best *Approval
	for _, a := range ts.approvals {
		if a.Key == key && (best == nil || a.Created.After(best.Created)) {
			best = a
		}
	}
	return best
}

// approvalGate holds an L2 call until a human decides: the first call
// creates a ticket and pauses the run; retries are told it is pending; an
// approved ticket lets exactly one identical call through; a denied one
// answers with the denial (the run has ended approval_denied). nil means
// the call may go.
func (p *Pipeline) approvalGate(tt *ToolTurn, r *runstate.Run, g *governance, ts *toolState, d policy.ToolDecision, now time.Time) *ToolAnswer {
	call := tt.Call
	a := ts.latestTicket(tt.key)
	if a != nil {
		switch a.effective(now) {
		case ApprovalPending:
			return pendingAnswer(a)
		case ApprovalApproved:
			a.Status, a.UsedAt = ApprovalUsed, now
			p.queueApproval(g, a)
			r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: call.Name, ArgumentsHash: tt.fp,
				Detail: "approved by " + a.DecidedBy + " (ticket " + a.Ticket + ")"})
			return nil
		case ApprovalDenied:
			c := *a
			return &ToolAnswer{Kind: ToolApprovalDenied, Status: 403, Reason: runstate.ReasonApprovalDenied, Approval: &c,
				Message: fmt.Sprintf("tool call %s was denied by %s (ticket %s); it will not be executed", call.Name, a.DecidedBy, a.Ticket)}
		}
		// Expired, or used by an earlier call that left no stored result
		// (it failed): a new decision is needed.
	}
	_, ttl := p.ToolRegistry().settings()
	a = &Approval{Ticket: runstate.NewID("t-"), RunID: r.ID, Server: call.Server, Tool: call.Name,
		ArgumentsHash: tt.fp, Level: d.Level, Reason: d.Reason, Status: ApprovalPending,
		Created: now.UTC(), Expires: now.Add(ttl).UTC(), Key: tt.key}
	ts.approvals[a.Ticket] = a
	p.queueApproval(g, a)
	if p.opts.Store != nil {
		g.own(ownedApproval, a.Ticket)
	}
	p.runs.Index(keyTicket+a.Ticket, r.ID)
	if r.State != runstate.Paused {
		ts.PausedAt = now
		r.Transition(runstate.Paused, now, "approval ticket "+a.Ticket+" for "+call.Name)
	}
	r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: call.Name, ArgumentsHash: tt.fp,
		Detail: "held for approval: ticket " + a.Ticket})
	p.log.Info("tool call held for approval", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "tool", call.Name, "ticket", a.Ticket,
		"arguments_hash", tt.fp)
	return pendingAnswer(a)
}

func pendingAnswer(a *Approval) *ToolAnswer {
	c := *a
	return &ToolAnswer{Kind: ToolPending, Status: 409, Reason: "approval_pending", Approval: &c,
		Message: fmt.Sprintf("pending approval, ticket %s: tool call %s (level %s) needs a human decision; "+
			"retry the identical call after approval (the ticket expires at %s)", a.Ticket, a.Tool, a.Level,
			a.Expires.Format(time.RFC3339))}
}

func (p *Pipeline) queueApproval(g *governance, a *Approval) {
	if p.opts.Store == nil {
		return
	}
	if v, err := jsonMarshal(a); err == nil {
		g.queue(store.Op{Bucket: store.Approvals, Key: []byte(a.Ticket), Value: v})
	}
}

// leavePause ends the run's pause; with paused time frozen (policy), the
// paused span is added to the run's deadline.
func (p *Pipeline) leavePause(r *runstate.Run, g *governance, ts *toolState, now time.Time) {
	if ts.PausedAt.IsZero() {
		return
	}
	paused := now.Sub(ts.PausedAt)
	ts.PausedAt = time.Time{}
	if g.limits.PausedTime == policy.PausedFreeze && g.limits.DeadlineMs > 0 && paused > 0 {
		g.limits.DeadlineMs += paused.Milliseconds()
		r.DeadlineMs = g.limits.DeadlineMs
		r.Record(now, runstate.Event{Type: runstate.EventTransition, Detail: fmt.Sprintf("paused time frozen: deadline +%d ms", paused.Milliseconds())})
	}
}

// ApprovalFilter selects tickets in Approvals.
type ApprovalFilter struct {
	Status string // "" for all
	RunID  string
}

// Approvals lists tickets, newest first.
func (p *Pipeline) Approvals(f ApprovalFilter) []Approval {
	now := p.now()
	runs := map[string]bool{}
	p.runs.LineageKeys(func(key, runID string) {
		if strings.HasPrefix(key, keyTicket) && (f.RunID == "" || f.RunID == runID || f.RunID == runstate.NameOf(runID)) {
			runs[runID] = true
		}
	})
	var out []Approval
	for id := range runs {
		r := p.runs.Get(id)
		if r == nil {
			continue
		}
		r.Lock()
		if g := govOf(r); g != nil && g.tools != nil {
			for _, a := range g.tools.approvals {
				c := *a
				c.Status = a.effective(now)
				if f.Status == "" || f.Status == c.Status {
					out = append(out, c)
				}
			}
		}
		r.Unlock()
	}
	if st := p.opts.Store; st != nil {
		// Tickets in the store only: those of runs that left memory (none
		// still open), or, with a shared store, another replica's.
		seen := make(map[string]bool, len(out))
		for _, a := range out {
			seen[a.Ticket] = true
		}
		_ = st.Scan(store.Approvals, func(k, v []byte) error {
			var a Approval
			if seen[string(k)] || json.Unmarshal(v, &a) != nil || (f.RunID != "" && a.RunID != f.RunID) {
				return nil
			}
			if a.Status = a.effective(now); f.Status == "" || f.Status == a.Status {
				out = append(out, a)
			}
			return nil
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].Ticket < out[j].Ticket // the same instant: still one order
	})
	return out
}

// open reports whether a ticket may still change: a human may decide it,
// or, approved, it lets one call through. A restart brings back the runs
// holding one, since tickets are decided and used in memory.
func (a *Approval) open(now time.Time) bool {
	s := a.effective(now)
	return s == ApprovalPending || s == ApprovalApproved
}

// ticketRun finds the run holding a ticket: in memory, or through the
// store, bringing the run back with the ticket attached.
func (p *Pipeline) ticketRun(ticket string) (*runstate.Run, error) {
	if r := p.runs.Lookup(keyTicket + ticket); r != nil {
		return r, nil
	}
	if p.opts.Store == nil {
		return nil, ErrNoTicket
	}
	v, err := p.opts.Store.Get(store.Approvals, []byte(ticket))
	if err != nil {
		return nil, err
	}
	var a Approval
	if v == nil || json.Unmarshal(v, &a) != nil || a.Ticket != ticket {
		return nil, ErrNoTicket
	}
	r, err := p.getRun(a.RunID)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, ErrNoTicket
	}
	r.Lock()
	if g := govOf(r); g != nil {
		if ts := g.toolState(); ts.approvals[ticket] == nil {
			ts.approvals[ticket] = &a
		}
	}
	r.Unlock()
	p.runs.Index(keyTicket+ticket, r.ID)
	return r, nil
}

// Ticket returns one ticket.
func (p *Pipeline) Ticket(ticket string) (Approval, error) {
	r, err := p.ticketRun(ticket)
	if err != nil {
		return Approval{}, err
	}
	r.Lock()
	defer r.Unlock()
	g := govOf(r)
	if g == nil || g.tools == nil || g.tools.approvals[ticket] == nil {
		return Approval{}, ErrNoTicket
	}
	c := *g.tools.approvals[ticket]
	c.Status = c.effective(p.now())
	return c, nil
}

// Decide records a human decision on a ticket: approve lets the retried
// identical call through once; deny ends the run approval_denied. by names
// who decided.
func (p *Pipeline) Decide(ticket, decision, by string) (Approval, error) {
	if decision != "approve" && decision != "deny" {
		return Approval{}, ErrBadDecision
	}
	r, err := p.ticketRun(ticket)
	if err != nil {
		return Approval{}, err
	}
	// Under the run's lock and caught up with the store: another replica
	// may have moved the run since this one last did (cancelled it, or
	// decided the ticket), and the decision is written over the run whole.
	tx, err := p.tx.Open(context.Background(), r, runtx.Need{})
	if err != nil {
		return Approval{}, err
	}
	g := govOf(r)
	if g == nil || g.tools == nil || g.tools.approvals[ticket] == nil {
		tx.Close()
		return Approval{}, ErrNoTicket
	}
	ts := g.tools
	a := ts.approvals[ticket]
	now := p.now()
	switch a.effective(now) {
	case ApprovalPending:
	case ApprovalExpired:
		c := *a
		c.Status = ApprovalExpired
		tx.Close()
		return c, ErrTicketExpired
	default:
		c := *a
		tx.Close()
		return c, ErrTicketClosed
	}
	a.DecidedBy, a.DecidedAt = by, now.UTC()
	if decision == "approve" {
		a.Status = ApprovalApproved
	} else {
		a.Status = ApprovalDenied
	}
	p.queueApproval(g, a)
	r.Record(now, runstate.Event{Type: runstate.EventToolCall, Tool: a.Tool, ArgumentsHash: a.ArgumentsHash,
		Detail: fmt.Sprintf("ticket %s %s by %s", a.Ticket, a.Status, by)})
	if ts.pendingCount(now) == 0 || decision == "deny" {
		p.leavePause(r, g, ts, now)
		if r.State == runstate.Paused && decision == "approve" {
			r.Transition(runstate.ExecutingTools, now, "approved: ticket "+a.Ticket)
		}
	}
	if decision == "deny" {
		p.terminate(r, g, runstate.Termination{Reason: runstate.ReasonApprovalDenied,
			Detail: fmt.Sprintf("%s denied by %s (ticket %s)", a.Tool, by, a.Ticket)}, runstate.Terminated, now)
	}
	p.log.Info("approval decided", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "ticket", a.Ticket, "decision", a.Status, "by", by)
	c := *a
	saved := tx.Commit(runtx.Wait)
	saved.Land()
	return c, nil
}
