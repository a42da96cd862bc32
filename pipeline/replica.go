package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/jsonscan"
)

// RunLock serialises a run's transitions across replicas that share one
// store (Redis): each replica takes the run's lock, catches up with the
// run's latest persisted version, moves it, persists, and lets go.
type RunLock interface {
	Lock(ctx context.Context, runID string) (unlock func(), err error)
}

// RunLockReader is a RunLock that also reads, in the round trip that
// takes the lock, the run's stored snapshot (store.Runs, nil when there is
// none) — refresh, which follows every lock, then costs no round trip of
// its own — and the state of the ledger named (nil when it does not
// exist), which admission reads next; and that can let go of the lock in
// the commit of what was written under it (release, an op of
// store.LockRelease), where unlock is a round trip of its own (Redis: each
// of these was one of about twelve a call).
type RunLockReader interface {
	LockRead(ctx context.Context, runID, ledger string, now time.Time) (unlock func(), release store.Op, snapshot []byte, state *accounting.LedgerSnapshot, err error)
}

// lockRiding is a RunLockReader whose lock's round trip can carry a
// settlement too (an accounting.Rider of the book's: settleRiding).
type lockRiding interface {
	LockReadRiding(ctx context.Context, runID, ledger string, now time.Time, rider accounting.Rider) (unlock func(), release store.Op, snapshot []byte, state *accounting.LedgerSnapshot, err error)
}

// shared reports that several replicas share runs through the store.
func (p *Pipeline) shared() bool { return p.opts.RunLock != nil && p.opts.Store != nil }

// prefetched is what a run's lock brought with it: the run's stored
// snapshot, for refresh, the state of the run's own ledger, for admission,
// and the op that lets go of the lock in a commit.
type prefetched struct {
	snapshot []byte
	read     bool                       // the lock read it (a nil snapshot: none stored)
	ledger   *accounting.LedgerSnapshot // the run's ledger (runLedgerPrefix), when it exists
	release  store.Op                   // Bucket store.LockRelease, or zero
}

// lockRun takes the run's lock when replicas share the store, with the
// run's stored snapshot when the lock can read it, and the run's own
// ledger's state too when admission will read it (ledger).
func (p *Pipeline) lockRun(ctx context.Context, runID string, ledger bool) (func(), prefetched, error) {
	return p.lockRunRiding(ctx, runID, ledger, nil)
}

// lockRunRiding is lockRun with rider, when not nil, sent in the lock's
// round trip; only a lockRiding lock is given one (see Finish).
func (p *Pipeline) lockRunRiding(ctx context.Context, runID string, ledger bool, rider accounting.Rider) (func(), prefetched, error) {
	if !p.shared() {
		return func() {}, prefetched{}, nil
	}
	if lr, ok := p.opts.RunLock.(RunLockReader); ok {
		key := ""
		if ledger {
			key = runLedgerPrefix + runID
		}
		var unlock func()
		var release store.Op
		var v []byte
		var state *accounting.LedgerSnapshot
		var err error
		if rl, ok := lr.(lockRiding); ok && rider != nil {
			unlock, release, v, state, err = rl.LockReadRiding(ctx, runID, key, p.now(), rider)
		} else {
			unlock, release, v, state, err = lr.LockRead(ctx, runID, key, p.now())
		}
		return unlock, prefetched{snapshot: v, read: err == nil, ledger: state, release: release}, err
	}
	unlock, err := p.opts.RunLock.Lock(ctx, runID)
	return unlock, prefetched{}, err
}

// refresh loads the run's latest persisted version when another replica
// moved it since this one did: from pre when its lock read it, else from
// the store. The caller holds r's mutex (and the run lock).
func (p *Pipeline) refresh(r *runstate.Run, pre prefetched) error {
	if !p.shared() {
		return nil
	}
	v := pre.snapshot
	if !pre.read {
		var err error
		if v, err = p.opts.Store.Get(store.Runs, []byte(r.ID)); err != nil {
			return err
		}
	}
	if v == nil {
		return nil
	}
	g := govOf(r)
	if g != nil {
		// The common case, a run moved by this replica last, is decided by
		// the version alone, where the whole snapshot was decoded at every
		// lock, twice a call.
		if ver, ok := storedVersion(v); ok && ver <= g.version {
			return nil
		}
	}
	var b runBlob
	if err := decode(v, &b); err != nil {
		return fmt.Errorf("run %s: %w", r.ID, err)
	}
	if g != nil && b.Version <= g.version {
		return nil
	}
	r.Load(b.Run, nil, p.now())
	ng := p.governanceOf(&b)
	if old := govOf(r); old != nil && old.tools != nil {
		// Tool results, tickets and blobs this replica holds stay; the
		// per-tool uses and the pause come from the newer state.
		fresh := ng.tools
		ng.tools = old.tools
		ng.tools.Uses, ng.tools.PausedAt = fresh.Uses, fresh.PausedAt
	}
	if old := govOf(r); old != nil {
		ng.owned = old.owned // none: a shared run lists its keys at every persist
	}
	r.Ext = ng
	return nil
}

// storedVersion reads the version of a stored run snapshot (runBlob)
// without decoding the rest; ok is false when it cannot, and the caller
// decodes it whole.
func storedVersion(v []byte) (version int64, ok bool) {
	s := unsafe.String(unsafe.SliceData(v), len(v))
	found := false
	end := jsonscan.Object(s, jsonscan.SkipWS(s, 0), false, func(key string, _, i int) int {
		j := jsonscan.SkipValue(s, i)
		if key == "version" && j > i {
			n, err := strconv.ParseInt(s[i:j], 10, 64)
			if err != nil {
				return -1
			}
			version, found = n, true
		}
		return j
	})
	if !found || end < 0 {
		return 0, false
	}
	return version, true
}

// governanceOf rebuilds a run's governance from its persisted form.
func (p *Pipeline) governanceOf(b *runBlob) *governance {
	g := &governance{runID: []byte(b.Run.ID), limits: b.Limits, term: b.Term, loop: b.Loop, budgeted: b.Budgeted,
		savedSeq: b.Run.LastEventSeq, version: b.Version, ledgers: b.Ledgers, ctx: b.Context,
		indexed: indexOf(b.Run.State.Final()), ownsAll: b.OwnsAll}
	if len(g.ledgers) > 0 {
		g.ledger = g.ledgers[0]
	}
	g.canon = p.canonicalizer(b.Loop.VolatileKeys)
	g.tools = restoreToolState(b.Tools)
	g.guard = newGuard(g)
	if len(b.Guard) > 0 {
		if err := g.guard.UnmarshalBinary(b.Guard); err != nil {
			p.log.Warn("loop guard state not restored", "run_id", runstate.NameOf(b.Run.ID), "tenant", runstate.TenantOf(b.Run.ID), "err", err)
		}
	}
	return g
}

// getRun returns a run by id: from memory, or from the store (another
// replica created it, it left memory, or a restart has not rebuilt it
// yet). nil when it does not exist.
func (p *Pipeline) getRun(id string) (*runstate.Run, error) {
	if r := p.runs.Get(id); r != nil || p.opts.Store == nil {
		return r, nil
	}
	v, err := p.opts.Store.Get(store.Runs, []byte(id))
	if err != nil || v == nil {
		return nil, err
	}
	var b runBlob
	if err := decode(v, &b); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	var events []runstate.Event
	if !p.shared() {
		events = p.timelineToRestore(&b)
	}
	r, _, err := p.revive(context.Background(), &b, events, !p.shared(), p.now())
	return r, err
}

// lookup resolves a lineage key: from memory, or with a shared store from
// the store.
func (p *Pipeline) lookup(key string) (*runstate.Run, error) {
	if r := p.runs.Lookup(key); r != nil || p.opts.Store == nil {
		return r, nil
	}
	v, err := p.opts.Store.Get(store.Lineage, []byte(key))
	if err != nil || v == nil {
		return nil, err
	}
	r, err := p.getRun(string(v))
	if r != nil {
		// Indexed again as the run's own key, so it leaves memory with it.
		r.Lock()
		if g := govOf(r); g != nil {
			p.runs.Index(key, r.ID)
			p.keepKey(g, key, r.ID)
		}
		r.Unlock()
	}
	return r, err
}

// Record returns a run's record; with a shared store it is brought up to
// date first, so every replica's control plane shows the same counters.
// id is a reference (RunRef).
func (p *Pipeline) Record(id string) (runstate.Record, bool, error) {
	id, err := p.resolveRun(id)
	if err != nil {
		return runstate.Record{}, false, err
	}
	r, err := p.getRun(id)
	if err != nil || r == nil {
		return runstate.Record{}, false, err
	}
	r.Lock()
	defer r.Unlock()
	if err := p.refresh(r, prefetched{}); err != nil {
		return runstate.Record{}, false, err
	}
	return r.Snapshot(p.now()), true, nil
}

// Events returns a run's timeline: from memory, or from the store when the
// run is shared by replicas or has left memory.
// id is a reference (RunRef).
func (p *Pipeline) Events(id string) ([]runstate.Event, bool, error) {
	id, err := p.resolveRun(id)
	if err != nil {
		return nil, false, err
	}
	if r := p.runs.Get(id); r != nil && !p.shared() {
		r.Lock()
		events, complete := append([]runstate.Event(nil), r.Events...), r.EventsComplete()
		r.Unlock()
		if complete || p.opts.Store == nil {
			return events, true, nil
		}
		// The older events left memory: the store's timeline, then what
		// memory holds past it (not yet persisted when the store was read).
		stored, err := p.storedEvents(id)
		if err != nil {
			return nil, false, err
		}
		var last int64
		if n := len(stored); n > 0 {
			last = stored[n-1].Seq
		}
		for _, e := range events {
			if e.Seq > last {
				stored = append(stored, e)
			}
		}
		return stored, true, nil
	}
	if p.opts.Store == nil {
		return nil, false, nil
	}
	v, err := p.opts.Store.Get(store.Runs, []byte(id))
	if err != nil || v == nil {
		return nil, false, err
	}
	evs, err := p.storedEvents(id)
	return evs, true, err
}

// Records lists run records: the runs in memory, and with a store every run
// it holds (other replicas', or runs that left memory), brought up to date.
func (p *Pipeline) Records(f runstate.Filter) ([]runstate.Record, error) {
	if p.opts.Store == nil {
		return p.runs.List(f), nil
	}
	now := p.now()
	var out []runstate.Record
	err := p.opts.Store.Scan(store.Runs, func(k, v []byte) error {
		id := string(k)
		if r := p.runs.Get(id); r != nil {
			if p.shared() {
				if _, _, err := p.Record(id); err != nil {
					return err
				}
			}
			r.Lock()
			rec := r.Snapshot(now)
			r.Unlock()
			if f.Match(rec) {
				out = append(out, rec)
			}
			return nil
		}
		// Only the run's state: its governance (the loop guard's state,
		// tool state, context) was most of a list's decoding.
		var b struct {
			Run runstate.Persisted `json:"run"`
		}
		if err := decode(v, &b); err != nil {
			return nil // a record that cannot be read is skipped, not fatal
		}
		rec := runstate.Restore(b.Run, nil, now).Snapshot(now)
		if f.Match(rec) {
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Runs created but not yet written (their first persist is in flight).
	seen := make(map[string]bool, len(out))
	for _, rec := range out {
		seen[rec.ID] = true
	}
	for _, rec := range p.runs.List(runstate.Filter{}) {
		if !seen[rec.ID] && f.Match(rec) {
			out = append(out, rec)
		}
	}
	return f.Sort(out), nil
}
