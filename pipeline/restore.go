package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// restoreRuns brings back the stored runs that can still move. Ended runs
// stay in the store until something asks for one (getRun: a call, a
// lineage key, the control plane), as after their eviction: loading every
// run ever stored made a restart's time and memory grow with the store's
// history (3 s and 570 MB for 22k runs). The unfinished ones are rebuilt
// by one worker a core while the scan reads on: their decoding was most
// of a restart's time.
func (p *Pipeline) restoreRuns(ctx context.Context, st store.Store, now time.Time) (int, error) {
	type stored struct{ key, snapshot []byte }
	work := make(chan stored, 64)
	var restored atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range min(runtime.GOMAXPROCS(0), 8) {
		g.Go(func() error {
			for s := range work {
				if err := p.restoreRun(ctx, s.snapshot, now); err != nil {
					return fmt.Errorf("run %q: %w", s.key, err)
				}
				restored.Add(1)
			}
			return nil
		})
	}
	err := st.Scan(store.Runs, func(k, v []byte) error {
		if storedFinal(v) {
			return nil
		}
		select {
		case work <- stored{bytes.Clone(k), bytes.Clone(v)}: // v lives as long as the scan's transaction
			return nil
		case <-gctx.Done(): // a worker failed
			return context.Cause(gctx)
		}
	})
	close(work)
	if werr := g.Wait(); werr != nil {
		err = werr
	}
	return int(restored.Load()), err
}

// restoreRun rebuilds one unfinished run from its snapshot and puts it in
// the registry with its ledgers and stored tool results. Safe for
// concurrent use (restoreRuns).
func (p *Pipeline) restoreRun(ctx context.Context, snapshot []byte, now time.Time) error {
	var b runBlob
	if err := decode(snapshot, &b); err != nil {
		return err
	}
	events := p.timelineToRestore(&b)
	r := runstate.Restore(b.Run, events, now)
	r.TrimEvents(b.Run.LastEventSeq, eventsInMemory)
	g := p.governanceOf(&b)
	if err := p.loadStoredResults(g, b.Run.ID); err != nil {
		return err
	}
	p.restoreLedgers(g.ledgers)
	if g.ledger != "" {
		lim := budgetOf(b.Limits).Vector
		// A run ledger missing from the store (never written) starts afresh.
		_ = p.book.Ensure(ctx, []accounting.LedgerSpec{{Key: g.ledger, Limit: lim,
			FinalReserve: finalReserve(lim, b.Limits.FinalReserve)}}, now)
	}
	r.Ext = g
	p.runs.Put(r)
	return nil
}

// timelineToRestore is the part of a stored run's timeline its restored
// run holds in memory: none, since the store holds it whole (Events reads
// it from there, and the run numbers its next event after the snapshot's
// LastEventSeq); reading every unfinished run's timeline was a third of a
// restart. A snapshot without LastEventSeq (written before it was kept, or
// by a run with no event) has its events read and LastEventSeq set from
// them, so the run neither numbers its next event as a stored one nor
// writes the stored ones again.
func (p *Pipeline) timelineToRestore(b *runBlob) []runstate.Event {
	if b.Run.LastEventSeq > 0 {
		return nil
	}
	events, _ := p.storedEvents(b.Run.ID)
	if n := len(events); n > 0 {
		b.Run.LastEventSeq = events[n-1].Seq
	}
	return events
}
