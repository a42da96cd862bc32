package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire"
)

// Observer receives what the pipeline measures; telemetry implements it so
// that no domain package imports Prometheus.
type Observer interface {
	ModelCall(api string, status int, total, upstream time.Duration)
	Usage(provider, model string, u wire.Usage, cost accounting.Money)
	RunStarted()
	RunEnded(state, reason string)
	Termination(reason, mode string)
	Reservation(result string)
	LoopDetection(detector, mode string)
}

type nopObserver struct{}

func (nopObserver) ModelCall(string, int, time.Duration, time.Duration) {}
func (nopObserver) Usage(string, string, wire.Usage, accounting.Money)  {}
func (nopObserver) RunStarted()                                         {}
func (nopObserver) RunEnded(string, string)                             {}
func (nopObserver) Termination(string, string)                          {}
func (nopObserver) Reservation(string)                                  {}
func (nopObserver) LoopDetection(string, string)                        {}

// Options wire the pipeline.
type Options struct {
	Runs    *runstate.Registry
	Policy  *policy.Engine
	Catalog *accounting.Catalog
	// Book holds the ledgers: in memory (default) or shared (Redis).
	Book     accounting.Book
	Observer Observer
	// Store, when set, receives every run change (DESIGN §9).
	Store  store.Store
	Logger *slog.Logger
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

	// epoch tells this process's reservation ids from a previous one's.
	epoch int64

	deferMu  sync.Mutex
	deferred []deferredSettle
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
	return &Pipeline{
		opts: o, book: o.Book, runs: o.Runs, pol: o.Policy, catalog: o.Catalog, obs: o.Observer,
		log: o.Logger, now: o.Now,
		canons: map[string]*loopguard.Canonicalizer{},
		epoch:  time.Now().UnixNano(),
	}
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
			p.retryDeferred(ctx)
			p.SweepLeases()
		}
	}
}

func (p *Pipeline) canonicalizer(keys []string) *loopguard.Canonicalizer {
	k := ""
	for _, s := range keys {
		k += s + "\x00"
	}
	p.canonMu.Lock()
	defer p.canonMu.Unlock()
	c := p.canons[k]
	if c == nil {
		c = loopguard.NewCanonicalizer(keys)
		p.canons[k] = c
	}
	return c
}
