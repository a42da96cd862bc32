package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// Restoring is the rebuilding of a store's unfinished runs that
// StartRestore leaves running.
type Restoring struct {
	done chan struct{}
	runs int
	err  error
}

// Wait blocks until the restore has ended and returns how many runs it
// brought back and why any did not come back.
func (rs *Restoring) Wait() (int, error) {
	<-rs.done
	return rs.runs, rs.err
}

// Done is closed when the restore has ended.
func (rs *Restoring) Done() <-chan struct{} { return rs.done }

// restoreRuns brings back the stored runs that can still move. Ended runs
// stay in the store until something asks for one (getRun: a call, a
// lineage key, the control plane), as after their eviction: loading every
// run ever stored made a restart's time and memory grow with the store's
// history (3 s and 570 MB for 22k runs). The unfinished ones are rebuilt
// by one worker a core while the scan reads on: their decoding was most
// of a restart's time. A run a call has loaded already is left as it is;
// one that cannot be rebuilt is logged and left in the store, and the
// others come back (its calls get the store's error, as before a
// restart). The first failures are returned, naming their runs.
func (p *Pipeline) restoreRuns(ctx context.Context, st store.Store, now time.Time) (int, error) {
	type stored struct {
		buf  []byte // the run's key, then its snapshot
		klen int
	}
	work := make(chan stored, 64)
	// The snapshots' copies go round: decoding copies what it keeps, and
	// a copy a run was a fifth of what a restart allocated.
	free := make(chan []byte, cap(work)+8)
	var restored atomic.Int64
	var failMu sync.Mutex
	var fails []error
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 8) {
		wg.Go(func() {
			for s := range work {
				created, err := p.restoreRun(ctx, s.buf[s.klen:], now)
				if err != nil {
					key := string(s.buf[:s.klen])
					p.log.Error("run not restored", "run_id", key, "err", err)
					failMu.Lock()
					if len(fails) < maxRestoreErrors {
						fails = append(fails, fmt.Errorf("run %q: %w", key, err))
					}
					failMu.Unlock()
				} else if created {
					restored.Add(1)
				}
				select {
				case free <- s.buf[:0]:
				default:
				}
			}
		})
	}
	err := st.Scan(store.Runs, func(k, v []byte) error {
		if err := ctx.Err(); err != nil { // the gateway is closing
			return err
		}
		if storedFinal(v) {
			return nil
		}
		var buf []byte // k and v live as long as the scan's transaction
		select {
		case buf = <-free:
		default:
		}
		buf = append(append(buf, k...), v...)
		select {
		case work <- stored{buf, len(k)}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(work)
	wg.Wait()
	return int(restored.Load()), errors.Join(append(fails, err)...)
}

// maxRestoreErrors bounds the failures a restore returns (each is logged).
const maxRestoreErrors = 8

// restoreRun rebuilds one unfinished run from its snapshot and puts it in
// the registry, unless a call has loaded it already. Safe for concurrent
// use (restoreRuns).
func (p *Pipeline) restoreRun(ctx context.Context, snapshot []byte, now time.Time) (bool, error) {
	var b runBlob
	if err := decode(snapshot, &b); err != nil {
		return false, err
	}
	if p.runs.Get(b.Run.ID) != nil {
		return false, nil // loaded by a call (getRun): newer than this snapshot
	}
	_, created, err := p.revive(ctx, &b, p.timelineToRestore(&b), true, now)
	return created, err
}

// revive builds a run from its stored snapshot, with its governance, its
// stored tool results and its ledgers, and adds it to the registry unless
// a run with its id is there, which it returns instead. The ledgers are in
// the book before the run is in the registry, where a call can find it
// and reserve on them. With ensure, a run ledger the store never got
// starts afresh (with a shared book, a round trip: a replica's loads of
// runs other replicas move skip it, as they always did).
func (p *Pipeline) revive(ctx context.Context, b *runBlob, events []runstate.Event, ensure bool, now time.Time) (*runstate.Run, bool, error) {
	r := runstate.Restore(b.Run, events, now)
	r.TrimEvents(b.Run.LastEventSeq, eventsInMemory)
	g := p.governanceOf(b)
	if err := p.loadStoredResults(g, b.Run.ID); err != nil {
		return nil, false, err
	}
	p.restoreLedgers(g.ledgers)
	if ensure && g.ledger != "" {
		lim := budgetOf(b.Limits).Vector
		// A run ledger missing from the store (never written) starts afresh.
		_ = p.book.Ensure(ctx, []accounting.LedgerSpec{{Key: g.ledger, Limit: lim,
			FinalReserve: finalReserve(lim, b.Limits.FinalReserve)}}, now)
	}
	r.Ext = g
	existing, created := p.runs.Adopt(r)
	return existing, created, nil
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
