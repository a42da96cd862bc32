package pipeline

import (
	"bytes"
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
// history (3 s and 570 MB for 22k runs). The unfinished ones are found
// through the store's list of them (store.Unfinished, kept by indexOps), so
// that finding them does not grow with the history either; a store
// written before the list was kept has every snapshot read once, and the
// list written. They are rebuilt by one worker a core while the list is
// read on: their decoding was most of a restart's time. A run a call has
// loaded already is left as it is; one that cannot be rebuilt is logged
// and left in the store, and the others come back (its calls get the
// store's error, as before a restart). The first failures are returned,
// naming their runs.
func (p *Pipeline) restoreRuns(ctx context.Context, st store.Store, now time.Time) (int, error) {
	complete, err := st.Get(store.Unfinished, listComplete)
	if err != nil {
		return 0, err
	}
	type stored struct {
		key, snapshot []byte
		buf           []byte // what holds them, to reuse; nil: not to
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
				created, err := p.restoreRun(ctx, s.snapshot, now)
				if err != nil {
					key := string(s.key)
					p.log.Error("run not restored", "run_id", runstate.NameOf(key), "tenant", runstate.TenantOf(key), "err", err)
					failMu.Lock()
					if len(fails) < maxRestoreErrors {
						fails = append(fails, fmt.Errorf("run %q: %w", key, err))
					}
					failMu.Unlock()
				} else if created {
					restored.Add(1)
				}
				if s.buf != nil {
					select {
					case free <- s.buf[:0]:
					default:
					}
				}
			}
		})
	}
	// send hands an unfinished run's snapshot to the workers: k and v as
	// they are when owned, else a copy (they live only as long as the
	// store's scan).
	send := func(k, v []byte, owned bool) error {
		s := stored{key: k, snapshot: v}
		if !owned {
			select {
			case s.buf = <-free:
			default:
			}
			s.buf = append(append(s.buf, k...), v...)
			s.key, s.snapshot = s.buf[:len(k)], s.buf[len(k):]
		}
		select {
		case work <- s:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if complete != nil {
		err = sendListed(ctx, st, send)
	} else {
		err = listUnfinished(ctx, st, send)
	}
	close(work)
	wg.Wait()
	return int(restored.Load()), errors.Join(append(fails, err)...)
}

// listComplete is the key in store.Unfinished that says the list holds
// every unfinished run: written once the snapshots of a store that had no
// list were all read. HTTP header values cannot carry its NUL; a run given
// this id some other way would, at its end, delete the key, and cost the
// next restart one reading of every snapshot.
var listComplete = []byte("\x00complete")

// sendListed sends the snapshots of the runs on the store's list of
// unfinished runs. An entry whose snapshot is final or gone (a run listed
// by the first restart's reading as it ended) is skipped; the retention
// sweep deletes it with its run.
func sendListed(ctx context.Context, st store.Store, send func(k, v []byte, owned bool) error) error {
	// The ids first: a read inside a bbolt scan can deadlock with a
	// checkpoint that remaps the file.
	var ids [][]byte
	err := st.Scan(store.Unfinished, func(k, _ []byte) error {
		if !bytes.Equal(k, listComplete) {
			ids = append(ids, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return st.GetMany(store.Runs, ids, func(i int, v []byte) error {
		if err := ctx.Err(); err != nil { // the gateway is closing
			return err
		}
		if v == nil || storedFinal(v) {
			return nil
		}
		return send(ids[i], v, true) // GetMany's value is the caller's
	})
}

// listUnfinished reads every stored snapshot, sends the unfinished runs'
// and writes the list of them (a store written before the list was
// kept). Runs written meanwhile list themselves (indexOps); one listed here
// as it ends keeps an entry sendListed skips.
func listUnfinished(ctx context.Context, st store.Store, send func(k, v []byte, owned bool) error) error {
	var ops []store.Op
	err := st.Scan(store.Runs, func(k, v []byte) error {
		if err := ctx.Err(); err != nil { // the gateway is closing
			return err
		}
		if storedFinal(v) {
			return nil
		}
		ops = append(ops, store.Op{Bucket: store.Unfinished, Key: bytes.Clone(k), Value: listedValue})
		return send(k, v, false)
	})
	if err != nil {
		return err
	}
	// The key that completes the list goes last, in the last commit.
	return applyAll(st, append(ops, store.Op{Bucket: store.Unfinished, Key: listComplete, Value: listedValue}), listBatch)
}

// listBatch bounds the entries of one commit of a first listing.
const listBatch = 4096

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
	if p.opts.StoreRecovered && !b.Run.State.Final() {
		g.ownsAll = false // keys it noted may have died with the last process
	}
	if err := p.loadStoredResults(g, b); err != nil {
		return nil, false, err
	}
	p.restoreLedgers(g.ledgers)
	if ensure && g.ledger != "" {
		lim := budgetOf(b.Limits).Vector
		// A run ledger missing from the store (never written) starts afresh.
		_ = p.book.Ensure(ctx, []accounting.LedgerSpec{{Key: g.ledger, Limit: lim,
			FinalReserve: finalReserve(lim, b.Limits.FinalReserve)}}, now)
	}
	// With the embedded store nothing of a stored run is in flight any
	// more: only the process that wrote it could have had calls going.
	// (Replicas sharing a store see one another's runs: theirs may be.)
	rel, released := p.releasedOf(b.Run.ID)
	changed := !p.shared() && settleRestored(r, rel, released, now)
	r.Ext = g
	existing, created := p.runs.Adopt(r)
	if created && changed {
		if released {
			p.forgetReleased(r.ID)
		}
		// With the store's next commit: the holds left the store already,
		// and a restart before this is written only loses the event.
		r.Lock()
		if ops := p.persistOps(r); ops != nil {
			p.opts.Store.Later(ops)
		}
		r.Unlock()
	}
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
