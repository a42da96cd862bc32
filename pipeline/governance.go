package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// governance is a run's policy answers and meters, fixed when the run starts
// (the budget question is asked once per run, docs/design.md §11) and kept in
// runstate.Run.Ext.
type governance struct {
	// runID is the run's id as bytes, for the store ops that carry it: ops
	// are handed over unchanged, so they share it.
	runID   []byte
	limits  policy.Limits
	term    policy.TerminationAnswer
	loop    policy.LoopThresholds
	ledger  string   // the run's own ledger key
	ledgers []string // own, then parent's chain, then team windows
	guard   *loopguard.Guard
	canon   *loopguard.Canonicalizer
	// ordersResults is set once a request of the run answered its calls
	// out of order: its history holds that turn from then on, so every
	// later request is put in call order too (orderResults).
	ordersResults bool
	// budgeted is true when tokens or cost are limited anywhere: only then
	// does the gateway cap the forwarded request's output.
	budgeted bool
	// savedSeq is the last event persisted; pending are writes for the next
	// persist (lineage keys, reservations opened or closed).
	savedSeq int64
	pending  []store.Op
	// recordSeq is the first event of the run's last event record (0: none
	// written by this process), which the next persist extends while it is
	// short (see eventsPerRecord).
	recordSeq int64
	// reportedSeq is the last event whose transition reached the observer.
	reportedSeq int64
	// version is the last persisted version of the run (runBlob.Version).
	version int64
	// stamp is the SHA-1 (hex) of the run's snapshot as this replica last
	// wrote or read it, when replicas share the store: a write guarded by
	// it (runtx.Guarded) is applied only while the stored run is that one.
	stamp string
	// held, while a call's end is written without the run's lock
	// (finishGuarded), keeps what it tells the observer and the runs it
	// ends after it until the write is known to stand: a write the guard
	// refused is made again from the stored run, which tells them itself.
	held *[]func()
	// seen is the run's own ledger as the settlement of the call that
	// wrote the run as stamp names read it (finishGuarded), for the next
	// call's start without the lock (beginGuarded); seenStamp is that
	// stamp.
	seen      *accounting.LedgerSnapshot
	seenStamp string
	// unsaved marks a new run whose first call went out before the run was
	// written (saveSoon): its Finish, or the timer, writes it.
	unsaved bool
	// indexed is where the store's indexes of runs hold the run (see
	// indexOps).
	indexed runIndex
	// keys are the lineage keys of the run held in memory, dropped with it
	// when it leaves memory.
	keys []string
	// owned is the keys of other buckets (lineage, tickets, blobs) the run
	// wrote that store.Owned does not list yet (see own); ownsAll is
	// whether store.Owned lists every such key of the run: a run begun by
	// a version that kept the list, whose retention can then find its keys
	// without reading every key of those buckets.
	owned   []byte
	ownsAll bool
	// ctx is the context manager's state: the compressed prefix, pinned
	// facts (persisted with the run).
	ctx *contextmgr.State
	// estimate lets the next call's input estimate (its reservation and
	// context check) read only what the agent added to its history;
	// cutEstimate does the same for the bodies whose tool output was cut
	// (in memory only: a restored run reads its next body whole once).
	estimate, cutEstimate contextmgr.EstimateCache
	// inputScale (per mille, 0 for none) corrects the run's input
	// estimates by what its provider counted (see calibrate).
	inputScale int64
	// tools is the run's tool governance: approvals, idempotent results,
	// blobs of cut output, per-tool uses (tool*.go); nil until a tool call.
	tools *toolState
	// rec is the run's recording for replay (record.go); nil when off.
	rec *recorder
	// static is the encoded part of the run's snapshot that never changes
	// (limits, termination, loop, budgeted, ledgers: set when the
	// governance is built); nil until the first persist (encodeRun).
	static []byte
	// lastSize is the length of the last encoded snapshot: the next one's
	// buffer is sized from it.
	lastSize int
}

func govOf(r *runstate.Run) *governance {
	g, _ := r.Ext.(*governance)
	return g
}

func runInput(r *runstate.Run, pr Principal, now time.Time) policy.RunInput {
	c := r.Counters
	return policy.RunInput{
		Principal: policy.Principal{Tenant: pr.Tenant, Team: pr.Team, User: pr.User, KeyID: pr.KeyID},
		Run: policy.RunInfo{
			ID: runstate.NameOf(r.ID), SessionID: r.SessionID, ParentID: runstate.NameOf(r.ParentID), AgentID: r.AgentID,
			TaskType: r.TaskType, State: string(r.State), Steps: c.AgentSteps,
			ModelCalls: c.ModelCalls, ToolCalls: c.ToolCalls, InputTokens: c.InputTokens,
			OutputTokens: c.OutputTokens, ElapsedMs: r.Elapsed(now).Milliseconds(),
			CostUSD: accounting.Money(c.ActualCost).USD(),
		},
	}
}

// govern asks the per-run policy questions and opens the run's ledgers;
// ensured is the run's own ledger as the book read it in the round trip
// that opened it (ensureReader), or nil. The caller holds r's mutex. An error
// (policy evaluation failed, bad budget header) leaves the run ungoverned,
// and the call is refused.
//
// With later set (the run's lock read that its ledger does not exist), a
// book that can make ledgers in a reservation's round trip
// (ensureAheadReserver) does not make them here: govern returns their
// specs in ahead, for the call's reservation to send first (or
// makeLedgers, before any other use of the book), and ensured as the
// run's ledger will be once made: its limit, nothing spent or reserved.
func (p *Pipeline) govern(ctx context.Context, r *runstate.Run, call *Call, later bool) (g *governance, ensured *accounting.LedgerSnapshot, ahead []accounting.LedgerSpec, err error) {
	in := runInput(r, call.Principal, p.now())
	limits := policy.DefaultLimits()
	term := policy.TerminationAnswer{Mode: policy.ModeFinalize}
	loop := policy.DefaultLoopThresholds()
	var windows []policy.TeamWindow
	if p.pol != nil {
		if limits, err = p.pol.Budget(ctx, in); err != nil {
			return nil, nil, nil, fmt.Errorf("budget policy: %w", err)
		}
		if term, err = p.pol.Termination(ctx, in); err != nil {
			return nil, nil, nil, fmt.Errorf("termination policy: %w", err)
		}
		if loop, err = p.pol.Loop(ctx, in); err != nil {
			return nil, nil, nil, fmt.Errorf("loop policy: %w", err)
		}
		if call.Principal.Team != "" {
			windows = p.pol.TeamWindows(call.Principal.Team)
		}
	}
	granted := budgetOf(limits)
	if call.RunBudget != "" {
		asked, err := accounting.ParseBudgetHeader(call.RunBudget)
		if err != nil {
			return nil, nil, nil, badRequest{fmt.Errorf("X-Run-Budget: %w", err)}
		}
		granted = granted.Tighten(asked) // a header only tightens
	}
	limits.MaxSteps = granted.Steps
	limits.MaxTokens = granted.Tokens
	limits.MaxInputTokens = granted.InputTokens
	limits.MaxOutputTokens = granted.OutputTokens
	limits.MaxToolCalls = granted.ToolCalls
	limits.MaxCostUSD = granted.Cost.USD()
	limits.DeadlineMs = granted.DeadlineMs

	g = &governance{runID: []byte(r.ID), limits: limits, term: term, loop: loop, ownsAll: true}
	lim := enforcedOnly(granted.Vector, term)
	g.ledger = runLedgerPrefix + r.ID
	g.ledgers = []string{g.ledger}
	specs := []accounting.LedgerSpec{{Key: g.ledger, Limit: lim, FinalReserve: finalReserve(lim, limits.FinalReserve)}}
	g.budgeted = lim.Tokens > 0 || lim.Cost > 0 || lim.OutputTokens > 0 || lim.InputTokens > 0
	if r.ParentID != "" {
		// From the store when the parent has left memory (ended): its
		// budget binds its sub-agents however long ago it ended. A parent
		// is named within the caller's tenant (identity): one that is not
		// there is refused, the same whether another tenant has a run of
		// that name or none does.
		parent, err := p.getRun(r.ParentID)
		if err != nil {
			return nil, nil, nil, unavailable{err}
		}
		if parent == nil {
			return nil, nil, nil, notFound{fmt.Errorf("X-Parent-Run-Id: no run %q", runstate.NameOf(r.ParentID))}
		}
		if parent != r {
			parent.Lock()
			if pg := govOf(parent); pg != nil {
				g.ledgers = append(g.ledgers, pg.ledgers...)
				g.budgeted = g.budgeted || pg.budgeted
			}
			parent.Unlock()
			if err := p.listChild(ctx, parent, r); err != nil {
				return nil, nil, nil, unavailable{err}
			}
		}
	}
	var teamKeys []string
	for _, w := range windows {
		key := teamLedgerPrefix + w.Team + ":" + w.Name
		wl := budgetOf(w.Limits).Vector
		specs = append(specs, accounting.LedgerSpec{Key: key, Limit: wl, Period: w.Period})
		g.ledgers = append(g.ledgers, key)
		teamKeys = append(teamKeys, key)
		g.budgeted = g.budgeted || wl.Tokens > 0 || wl.Cost > 0
	}
	if _, ok := p.book.(ensureAheadReserver); ok && later && len(windows) == 0 {
		// Team windows' limits are set after they are made: they go the
		// way of every other run.
		ahead = specs
		ensured = &accounting.LedgerSnapshot{Limit: lim}
	} else if er, ok := p.book.(ensureReader); ok {
		if ensured, err = er.EnsureRead(ctx, specs, p.now(), g.ledger); err != nil {
			return nil, nil, nil, unavailable{err}
		}
	} else if err := p.book.Ensure(ctx, specs, p.now()); err != nil {
		return nil, nil, nil, unavailable{err}
	}
	for i, key := range teamKeys { // policy may have changed a window's limit
		if err := p.book.SetLimit(ctx, key, budgetOf(windows[i].Limits).Vector, accounting.Vector{}); err != nil {
			return nil, nil, nil, unavailable{err}
		}
	}
	g.canon = p.canonicalizer(loop.VolatileKeys)
	g.guard = newGuard(g)
	r.MaxSteps = limits.MaxSteps
	r.DeadlineMs = limits.DeadlineMs
	p.startRecording(ctx, r, call, in, g)
	return g, ensured, ahead, nil
}

// ensureReader is a book that reads a ledger in the round trip that makes
// the run's ledgers (redisbook.Book): a new run's first call reads its own
// ledger next (see Turn.ledgerAtLock).
type ensureReader interface {
	EnsureRead(ctx context.Context, specs []accounting.LedgerSpec, now time.Time, key string) (*accounting.LedgerSnapshot, error)
}

// ensureAheadReserver is a book that makes ledgers ahead of a reservation
// in its round trip (redisbook.Book; see govern's ahead).
type ensureAheadReserver interface {
	ReserveEnsuring(ctx context.Context, specs []accounting.LedgerSpec, ensureAt time.Time, keys []string, want accounting.Vector,
		useFinalReserve bool, lease time.Duration, now time.Time, readHead, headFinalReserve bool) (h *accounting.Hold, short *accounting.Shortfall, head accounting.Vector, read bool, err error)
}

// budgetOf turns policy limits into a ledger budget.
func budgetOf(l policy.Limits) accounting.Budget {
	return accounting.Budget{
		Vector: accounting.Vector{
			Steps: l.MaxSteps, Tokens: l.MaxTokens, InputTokens: l.MaxInputTokens,
			OutputTokens: l.MaxOutputTokens, ToolCalls: l.MaxToolCalls,
			Cost: accounting.USD(l.MaxCostUSD),
		},
		DeadlineMs: l.DeadlineMs,
	}
}

// finalReserve is the part of each budget kept for the wrap-up. Steps have
// none: the last step itself is the wrap-up.
func finalReserve(lim accounting.Vector, frac float64) accounting.Vector {
	part := func(v int64) int64 { return int64(float64(v) * frac) }
	return accounting.Vector{
		Tokens: part(lim.Tokens), InputTokens: part(lim.InputTokens),
		OutputTokens: part(lim.OutputTokens), ToolCalls: 0,
		Cost: accounting.Money(part(int64(lim.Cost))),
	}
}

// badRequest marks an error that is the caller's fault (400).
type badRequest struct{ error }

func (b badRequest) Unwrap() error { return b.error }

// notFound marks a call that names a run the caller has not got (404).
type notFound struct{ error }

func (n notFound) Unwrap() error { return n.error }

// unavailable marks an error of the ledger book or the store (503): a call
// that draws on a budget is refused while the book cannot be reached.
type unavailable struct{ error }

func (u unavailable) Unwrap() error { return u.error }

func newGuard(g *governance) *loopguard.Guard {
	return loopguard.NewGuard(loopguard.Thresholds{
		SameInRow: g.loop.SameInRow, Window: g.loop.Window, WindowRepeats: g.loop.WindowRepeats,
		MaxCyclePeriod: g.loop.MaxCyclePeriod, StallSteps: g.loop.StallSteps,
		SemanticRepeats: g.loop.SemanticRepeats, SemanticWindow: g.loop.SemanticWindow,
		SemanticSimilarity: g.loop.SemanticSimilarity,
	})
}

// enforcedOnly leaves out of a run's ledger the limits whose line runs in
// shadow mode: the ledger then never refuses for them, and the pipeline
// records where it would have.
func enforcedOnly(v accounting.Vector, term policy.TerminationAnswer) accounting.Vector {
	if term.EnforcementOf(runstate.ReasonMaxSteps) == policy.Shadow {
		v.Steps = 0
	}
	if term.EnforcementOf(runstate.ReasonTokenBudget) == policy.Shadow {
		v.Tokens, v.InputTokens, v.OutputTokens = 0, 0, 0
	}
	if term.EnforcementOf(runstate.ReasonCostBudget) == policy.Shadow {
		v.Cost = 0
	}
	if term.EnforcementOf(runstate.ReasonToolQuota) == policy.Shadow {
		v.ToolCalls = 0
	}
	return v
}

// idBytes returns id as bytes: the run's own, shared, when it is the run's.
func (g *governance) idBytes(id string) []byte {
	if string(g.runID) != id {
		return []byte(id)
	}
	return g.runID
}
