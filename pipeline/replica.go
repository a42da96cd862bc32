package pipeline

import (
	"context"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/jsonscan"
)

// RunLock serialises a run's transitions across replicas that share one
// store (Redis); see runtx.Lock.
type RunLock = runtx.Lock

// RunLockReader is a RunLock that reads the run's snapshot and ledger in
// the round trip that takes it; see runtx.LockReader.
type RunLockReader = runtx.LockReader

// shared reports that several replicas share runs through the store.
func (p *Pipeline) shared() bool { return p.tx.Shared() }

// txRuns is the pipeline's side of a run's transaction (runtx.Runs): the
// run's encoding and its queued writes.
type txRuns struct{ p *Pipeline }

func (tr txRuns) Refresh(r *runstate.Run, v []byte) error { return tr.p.refresh(r, v) }
func (tr txRuns) Ops(r *runstate.Run) []store.Op          { return tr.p.persistOps(r) }
func (tr txRuns) Later(r *runstate.Run)                   { tr.p.persistPendingLater(r) }
func (tr txRuns) Soon(r *runstate.Run)                    { tr.p.saveSoon(r) }

// refresh loads v, the run's stored snapshot, when another replica moved
// the run since this one did (runtx.Runs.Refresh). The caller holds r's
// mutex (and the run lock).
func (p *Pipeline) refresh(r *runstate.Run, v []byte) error {
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
	if p.tx.Optimistic() {
		ng.stamp = store.Stamp(v)
	}
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
	return p.reviveStored(id, v)
}

// reviveStored brings the run id back into memory from v, its stored
// snapshot; a run another call brought back meanwhile is the one returned.
func (p *Pipeline) reviveStored(id string, v []byte) (*runstate.Run, error) {
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
	if err := p.tx.Refresh(r); err != nil {
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
