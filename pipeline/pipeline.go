package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire"
)

// Observer receives what the pipeline measures; telemetry implements it so
// that no domain package imports Prometheus.
type Observer interface {
	// ModelCall reports every call once, from Finish: metrics, the
	// per-call log line and the end of its upstream span.
	ModelCall(c CallReport)
	Usage(provider, model string, u wire.Usage, cost accounting.Money)
	RunStarted()
	// RunEnded reports a run's end, completed or terminated.
	RunEnded(e RunEnd)
	Termination(reason, mode string)
	Reservation(result string)
	LoopDetection(detector, mode string)
	// Transition reports a state change as the run's events record it
	// (from "" when the run starts), so that each state can be a span.
	Transition(runID, from, to string, at time.Time)
	// UpstreamStart is called as a call is forwarded. The observer may add
	// propagation headers (traceparent) through set; what it returns comes
	// back in the call's CallReport.Trace.
	UpstreamStart(runID, api, provider, model string, set func(key, value string)) any
	// Compression reports a context rewrite: estimated tokens before and after.
	Compression(api string, before, after int64)
	// ToolOutputCut reports the long tool output a forwarded request left
	// out (docs/design.md §6): its characters and estimated tokens, by tenant.
	ToolOutputCut(tenant string, chars, tokens int64)
}

// RunEnd is how a run ended, for metrics, the trace and the log line.
type RunEnd struct {
	RunID, SessionID, Tenant, Team        string
	State, Reason, Detail, Detector, Mode string
	Step                                  int64
	// ArgumentsHash is the last tool action's fingerprint, never its arguments.
	LastTool, ArgumentsHash string
	At                      time.Time
}

func runEnd(r *runstate.Run, state runstate.State, term runstate.Termination, now time.Time) RunEnd {
	e := RunEnd{RunID: r.ID, SessionID: r.SessionID, Tenant: r.Tenant, Team: r.Team, State: string(state),
		Reason: term.Reason, Detail: term.Detail, Detector: term.Detector, Mode: term.Mode, Step: term.Step, At: now}
	if e.Step == 0 {
		e.Step = r.Counters.AgentSteps
	}
	if a := r.LastAction; a != nil {
		e.LastTool, e.ArgumentsHash = a.Tool, a.ArgumentsHash
	}
	return e
}

// ended reports a run's end, after every transition that led to it, so
// that the observer sees the states in order.
func (p *Pipeline) ended(r *runstate.Run, state runstate.State, term runstate.Termination, now time.Time) {
	g := govOf(r)
	p.reportTransitions(r, g)
	e := runEnd(r, state, term, now)
	if g.holding() {
		g.hold(func() { p.obs.RunEnded(e) })
	} else {
		p.obs.RunEnded(e)
	}
}

// reportTransitions hands the transitions recorded since the last report to
// the observer. It runs at every persist, the one place every state change
// passes, whichever stage made it. The caller holds r's mutex.
func (p *Pipeline) reportTransitions(r *runstate.Run, g *governance) {
	if g == nil {
		return
	}
	for _, ev := range r.EventsSince(g.reportedSeq) {
		if ev.Type == runstate.EventTransition || ev.Type == runstate.EventResumed {
			at, err := time.Parse(time.RFC3339Nano, ev.At)
			if err != nil {
				at = p.now()
			}
			from, to := string(ev.From), string(ev.To)
			if g.holding() {
				g.hold(func() { p.obs.Transition(r.ID, from, to, at) })
			} else {
				p.obs.Transition(r.ID, from, to, at)
			}
		}
		g.reportedSeq = ev.Seq
	}
}

// Forwarding tells the observer that the turn's call goes upstream now; set
// receives the headers to propagate (traceparent) when tracing is on.
func (p *Pipeline) Forwarding(t *Turn, set func(key, value string)) {
	if t.run == nil {
		return
	}
	t.trace = p.obs.UpstreamStart(t.run.ID, t.Req.API.String(), t.Req.API.Provider(), t.Req.Model, set)
}

type nopObserver struct{}

func (nopObserver) ModelCall(CallReport)                               {}
func (nopObserver) Usage(string, string, wire.Usage, accounting.Money) {}
func (nopObserver) RunStarted()                                        {}
func (nopObserver) RunEnded(RunEnd)                                    {}
func (nopObserver) Termination(string, string)                         {}
func (nopObserver) Reservation(string)                                 {}
func (nopObserver) LoopDetection(string, string)                       {}
func (nopObserver) Transition(string, string, string, time.Time)       {}
func (nopObserver) Compression(string, int64, int64)                   {}
func (nopObserver) ToolOutputCut(string, int64, int64)                 {}
func (nopObserver) UpstreamStart(string, string, string, string, func(string, string)) any {
	return nil
}

// Options wire the pipeline.
type Options struct {
	Runs    *runstate.Registry
	Policy  *policy.Engine
	Catalog *accounting.Catalog
	// Book holds the ledgers: in memory (default) or shared (Redis).
	Book     accounting.Book
	Observer Observer
	// Store, when set, receives every run change (docs/design.md §9).
	Store store.Store
	// RunLock, with a store shared by several replicas, serialises each
	// run's transitions across them.
	RunLock RunLock
	// Context, when set, keeps forwarded requests under the watermark of
	// the model's window (a template: its Blob is set per run).
	Context *contextmgr.Rewriter
	// EndedRetention is how long an ended run stays in memory when a store
	// holds it (default 1 s, and up to a sweeper period more); later calls
	// load it back. Kept short because every ended run in memory is heap
	// the collector marks on each cycle, and memory that grows with the
	// rate at which runs end: at a high rate, ended runs waiting to leave
	// can be most of the live heap.
	EndedRetention time.Duration
	// StoreRecovered says the store replayed a log its previous process
	// left (store.Bolt.Recovered): that process crashed, and the runs it
	// left unfinished may have noted keys it never listed (see own). Such
	// a run, rebuilt or loaded, no longer claims to list them all: its
	// retention finds them by reading their buckets.
	StoreRecovered bool
	// StoreRetention is how long the store keeps a run after it ended
	// (SweepStored); 0 keeps every run.
	StoreRetention time.Duration
	Logger         *slog.Logger
	// UpstreamTimeout is the configured bound of one upstream call.
	UpstreamTimeout time.Duration
	// Lease is the reservation lease.
	Lease time.Duration
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

// Pipeline is the core. It is safe for concurrent use.
type Pipeline struct {
	opts    Options
	book    accounting.Book
	runs    *runstate.Registry
	pol     *policy.Engine
	catalog *accounting.Catalog
	obs     Observer
	log     *slog.Logger
	now     func() time.Time

	canonMu sync.Mutex
	canons  map[string]*loopguard.Canonicalizer

	// epoch tells this process's holds from a previous one's (their keys
	// in the store begin with it: reservationKey).
	epoch int64
	// released is what the restart gave back of each run's holds, until
	// the run is rebuilt or loaded and records it (releaseDeadHolds).
	releasedMu sync.Mutex
	released   map[string]releasedHolds

	deferMu  sync.Mutex
	deferred []deferredSettle

	// soon holds new runs whose first call went out unsaved (saveSoon).
	soonMu    sync.Mutex
	soon      []*runstate.Run
	soonTimer *time.Timer

	// recs indexes the runs recorded for replay (record.go).
	recs recordings
	// retain paces the store's retention sweeps (retain.go).
	retain retention
	// tx opens the transactions on runs (runtx).
	tx *runtx.Manager

	// restoring is set while a restart rebuilds unfinished runs
	// (StartRestore): no ended run leaves memory meanwhile.
	restoring atomic.Bool
}

// New builds a pipeline.
func New(o Options) *Pipeline {
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Runs == nil {
		o.Runs = runstate.NewRegistry()
		o.Runs.Clock = o.Now // one clock for run ages and deadlines
	}
	if o.Catalog == nil {
		o.Catalog = accounting.DefaultCatalog()
	}
	if o.Book == nil {
		o.Book = accounting.NewMemBook()
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 10 * time.Minute
	}
	if o.Lease <= 0 {
		o.Lease = 15 * time.Minute
	}
	if o.EndedRetention <= 0 {
		o.EndedRetention = time.Second
	}
	p := &Pipeline{
		opts: o, book: o.Book, runs: o.Runs, pol: o.Policy, catalog: o.Catalog, obs: o.Observer,
		log: o.Logger, now: o.Now,
		canons: map[string]*loopguard.Canonicalizer{},
		epoch:  time.Now().UnixNano(),
	}
	p.soonTimer = time.AfterFunc(time.Hour, p.SaveUnsaved)
	p.soonTimer.Stop()
	p.tx = runtx.New(runtx.Config{Store: o.Store, Lock: o.RunLock, Runs: txRuns{p}, Log: o.Logger, Now: o.Now,
		LedgerPrefix: runLedgerPrefix, Wait: persistWait})
	return p
}

// Runs is the run registry.
func (p *Pipeline) Runs() *runstate.Registry { return p.runs }

// Catalog is the price catalog in force.
func (p *Pipeline) Catalog() *accounting.Catalog { return p.catalog }

// SweepLeases releases reservations whose calls never came back; call it
// periodically.
func (p *Pipeline) SweepLeases() int {
	n, err := p.book.Sweep(context.Background(), p.now())
	if err != nil {
		p.log.Warn("sweeping leases failed", "err", err)
	}
	return n
}

// RunSweeper sweeps leases every interval until ctx ends.
func (p *Pipeline) RunSweeper(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.endOverdue(p.now())
			p.evictEnded(p.now())
			p.retryDeferred(ctx)
			p.SweepLeases()
			p.SweepRecordings(false)
			if _, err := p.SweepStored(false); err != nil {
				p.log.Warn("deleting stored runs past retention failed", "err", err)
			}
		}
	}
}

func (p *Pipeline) canonicalizer(keys []string) *loopguard.Canonicalizer {
	var buf [512]byte
	k := buf[:0]
	for _, s := range keys {
		k = append(append(k, s...), 0)
	}
	p.canonMu.Lock()
	defer p.canonMu.Unlock()
	c := p.canons[string(k)] // a lookup by a []byte key allocates nothing
	if c == nil {
		c = loopguard.NewCanonicalizer(keys)
		p.canons[string(k)] = c
	}
	return c
}
