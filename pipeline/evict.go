package pipeline

import (
	"slices"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/store"
)

// evictEnded takes runs that ended more than EndedRetention ago out of
// memory: with a store they live on there (a later call, a record request
// or a resume loads them back, with their stored tool results; blobs and
// closed tickets are read from the store), and memory stays proportional
// to the runs in progress rather than to every run ever seen. A run
// holding a pending ticket stays until it is decided or expires: tickets
// are decided in memory (an approved one of an ended run is never used).
func (p *Pipeline) evictEnded(now time.Time) int {
	if p.opts.Store == nil {
		return 0 // memory is the only home of runs
	}
	if p.restoring.Load() {
		// A run that a call loaded and ended meanwhile would be rebuilt,
		// once gone, from the older snapshot the restore read.
		return 0
	}
	n := 0
	for _, r := range p.runs.Ended(now.Add(-p.opts.EndedRetention)) {
		r.Lock()
		g := govOf(r)
		keep := !r.State.Final() || r.Inflight > 0 || (g != nil && (len(g.pending) > 0 || g.unsaved))
		if g != nil && g.tools != nil {
			for _, a := range g.tools.approvals {
				keep = keep || a.effective(now) == ApprovalPending
			}
		}
		if !keep && g != nil && len(g.owned) > 0 {
			// Keys written since the run's last persist, listed as it
			// leaves memory (not under a version a persist may use).
			p.opts.Store.Later(p.ownedOp(nil, g, true, evictedVersion))
		}
		var keys []string
		var ledger string
		if g != nil {
			keys, ledger = g.keys, g.ledger
			if ts := g.tools; !keep && ts != nil && len(ts.blobs)+len(ts.approvals) > 0 {
				keys = slices.Clone(keys)
				for handle := range ts.blobs {
					keys = append(keys, keyBlob+handle)
				}
				for ticket := range ts.approvals {
					keys = append(keys, keyTicket+ticket)
				}
			}
		}
		r.Unlock()
		if keep {
			continue
		}
		p.runs.Remove(r.ID, keys)
		if mb, ok := p.book.(*accounting.MemBook); ok && ledger != "" {
			mb.Drop(ledger)
		}
		n++
	}
	return n
}

// restoreLedgers puts a loaded run's ledgers back into the in-process book
// from the store (they left memory with the run).
func (p *Pipeline) restoreLedgers(keys []string) {
	mb, ok := p.book.(*accounting.MemBook)
	if !ok {
		return
	}
	for _, k := range keys {
		if mb.Ledger(k) != nil {
			continue
		}
		v, err := p.opts.Store.Get(store.Ledgers, []byte(k))
		if err != nil || v == nil {
			continue
		}
		var ls accounting.LedgerState
		if decode(v, &ls) == nil {
			ls.Reserved = accounting.Vector{} // nothing of an ended run is in flight
			mb.Put(accounting.RestoreLedger(ls))
		}
	}
}

// SweepEnded evicts now what the sweeper would (for tests and tools).
func (p *Pipeline) SweepEnded() int { return p.evictEnded(p.now()) }
