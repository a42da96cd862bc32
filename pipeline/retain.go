package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// storeSweepEvery spaces the store's retention sweeps: a run outlives its
// retention by at most this much.
const storeSweepEvery = time.Hour

// storeSweepMax bounds the runs one sweep deletes (the next sweep goes
// on), so that a first sweep over a long history is not one long burst of
// writes.
const storeSweepMax = 50_000

// storeSweepBatch is the ops of one store write of a sweep.
const storeSweepBatch = 1024

// retention is the state of the store's retention sweeps.
type retention struct {
	mu        sync.Mutex
	lastSweep time.Time
}

// The store's two indexes for the retention sweep, so that a sweep reads
// what expires rather than every stored run and every key that may point
// at one (work that grew with the month of history a store keeps):
//
//   - store.Ended lists runs by their end: a run's entry is written with
//     its first final snapshot (indexOps), and again when a resumed run
//     ends again. An entry whose run has since resumed, ended later or gone is
//     stale: the sweep deletes it when it meets it.
//   - store.Owned lists, by run, the keys of the buckets keyed by
//     something else than the run id (lineage keys, tickets, blobs) that
//     the run wrote (own, ownedOp). A run begun before the list was kept
//     (its snapshot without owns_all) has its keys found the old way, by
//     reading those buckets whole.
//
// A store written before store.Ended was kept has its first sweep read
// every snapshot once, list the ended runs it keeps, and mark the index
// complete (endedComplete).

// endedComplete marks store.Ended as listing every ended run; it sorts
// after every entry, whose first byte is a time's (and reads as a time
// centuries away).
var endedComplete = []byte("\xffcomplete")

// endedKey is a run's key in store.Ended.
func endedKey(end time.Time, id []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(end.UnixNano()))
	return append(k, id...)
}

// Kinds of key in a store.Owned record: the bucket the key is in.
const (
	ownedLineage  = 'l'
	ownedApproval = 'a'
	ownedBlob     = 'b'
)

var ownedBuckets = map[byte]store.Bucket{ownedLineage: store.Lineage, ownedApproval: store.Approvals, ownedBlob: store.Blobs}

// ownedFlush is how many bytes of keys a run holds before its next
// persist writes them to store.Owned: a record every dozen calls or so of
// a long run, not one a call, and at most this much in memory a run.
const ownedFlush = 1024

// own notes a key the run wrote in a bucket not keyed by run id, for the
// next ownedOp. The caller holds the run's lock.
func (g *governance) own(kind byte, key string) {
	if g.owned == nil {
		g.owned = make([]byte, 0, 256) // grown once or twice in a run's life, not at every key
	}
	g.owned = append(g.owned, kind)
	g.owned = binary.AppendUvarint(g.owned, uint64(len(key)))
	g.owned = append(g.owned, key...)
}

// ownedOp writes the keys own noted that indexOps did not take to
// store.Owned, keyed by the persist's version, once they are ownedFlush
// long, when the run is final (it may leave memory) or when replicas
// share the run (the next persist may be another's).
func (p *Pipeline) ownedOp(ops []store.Op, g *governance, final bool, mark uint64) []store.Op {
	if len(g.owned) == 0 || (len(g.owned) < ownedFlush && !final && !p.shared()) {
		return ops
	}
	k := binary.BigEndian.AppendUint64(append(append(make([]byte, 0, len(g.runID)+9), g.runID...), 0), uint64(g.version)|mark)
	ops = append(ops, store.Op{Bucket: store.Owned, Key: k, Value: g.owned})
	g.owned = nil // handed over to the store
	return ops
}

// evictedVersion and stoppedVersion mark the key of the store.Owned record
// written as a run leaves memory, or as the gateway stops: its version is
// that of the run's last persist, which may have written a record of its
// own.
const (
	evictedVersion = 1 << 63
	stoppedVersion = 1 << 62
)

// SaveOwned writes the keys the runs in memory noted that the store does
// not list yet (see own): a gateway that stops calls it before it closes
// the store, since the next process rebuilds those runs without them. (A
// crash loses them: see Options.StoreRecovered.)
func (p *Pipeline) SaveOwned() {
	if p.opts.Store == nil {
		return
	}
	var ops []store.Op
	p.runs.Each(func(r *runstate.Run) {
		r.Lock()
		if g := govOf(r); g != nil {
			ops = p.ownedOp(ops, g, true, stoppedVersion)
		}
		r.Unlock()
	})
	if len(ops) == 0 {
		return
	}
	if err := <-p.opts.Store.Apply(ops); err != nil {
		p.log.Error("the runs' lists of keys not saved", "runs", len(ops), "err", err)
	}
}

// ownedKeys calls fn with each key of a store.Owned record.
func ownedKeys(v []byte, fn func(b store.Bucket, key []byte)) {
	for len(v) > 1 {
		b, ok := ownedBuckets[v[0]]
		n, w := binary.Uvarint(v[1:])
		if !ok || w <= 0 || n > uint64(len(v)-1-w) {
			return
		}
		v = v[1+w:]
		fn(b, v[:n])
		v = v[n:]
	}
}

// errStopScan ends a scan early.
var errStopScan = errors.New("scan stopped")

// expiredRun is a stored run past its retention.
type expiredRun struct {
	id      string
	ownsAll bool
	entry   []byte // its key in store.Ended
	owned   []byte // the keys that entry lists (see indexOps)
}

// SweepStored deletes from the store the runs that ended more than
// StoreRetention ago and are not in memory: their snapshot, timeline,
// own ledger, lineage keys, stored tool results, approval tickets and
// blobs (recordings keep their own retention). Without it the store grows
// with every run for good, and so does the work of reading it. It runs
// from the sweeper at most once an hour unless forced, and reports how
// many runs it deleted.
func (p *Pipeline) SweepStored(force bool) (int, error) {
	st := p.opts.Store
	if st == nil || p.opts.StoreRetention <= 0 {
		return 0, nil
	}
	now := p.now()
	p.retain.mu.Lock()
	defer p.retain.mu.Unlock()
	if !force && now.Sub(p.retain.lastSweep) < storeSweepEvery {
		return 0, nil
	}
	p.retain.lastSweep = now
	cutoff := now.Add(-p.opts.StoreRetention)

	complete, err := st.Get(store.Ended, endedComplete)
	if err != nil {
		return 0, err
	}
	var expired []expiredRun
	var ops []store.Op // deletes of stale entries of store.Ended
	if complete != nil {
		expired, ops, err = p.expiredByIndex(cutoff)
	} else {
		expired, err = p.indexEnded(cutoff)
	}
	if err == nil {
		ops, err = p.forgetRuns(expired, ops)
	}
	if err == nil {
		err = applyAll(st, ops, storeSweepBatch)
	}
	if err == nil && complete == nil {
		// Last: until then, the next sweep reads every snapshot again.
		err = <-st.Apply([]store.Op{{Bucket: store.Ended, Key: endedComplete, Value: listedValue}})
	}
	if err != nil || len(expired) == 0 {
		return 0, err
	}
	ledgers := make([]string, len(expired))
	for i, e := range expired {
		ledgers[i] = runLedgerPrefix + e.id
	}
	if err := p.book.Forget(context.Background(), ledgers); err != nil {
		return 0, err
	}
	p.log.Info("stored runs past retention deleted", "runs", len(expired), "retention", p.opts.StoreRetention.String())
	return len(expired), nil
}

// storedEnd is what the sweep reads of a stored snapshot.
type storedEnd struct {
	Run struct {
		State runstate.State `json:"state"`
		Ended time.Time      `json:"ended"`
	} `json:"run"`
	OwnsAll bool `json:"owns_all"`
}

// expiredAt reports whether a stored run ended before cutoff.
func (b *storedEnd) expiredAt(cutoff time.Time) bool {
	return b.Run.State.Final() && !b.Run.Ended.IsZero() && b.Run.Ended.Before(cutoff)
}

// expiredByIndex finds the expired runs through store.Ended, reading the
// entries older than cutoff and their runs' snapshots only. It returns
// them with the deletes of the stale entries it read.
func (p *Pipeline) expiredByIndex(cutoff time.Time) ([]expiredRun, []store.Op, error) {
	st := p.opts.Store
	var entries []store.Op
	until := uint64(cutoff.UnixNano())
	err := st.Scan(store.Ended, func(k, v []byte) error {
		if len(k) <= 8 || binary.BigEndian.Uint64(k) >= until || len(entries) >= storeSweepMax {
			return errStopScan
		}
		entries = append(entries, store.Op{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, nil, err
	}
	var expired []expiredRun
	var ops []store.Op
	ids := make([][]byte, len(entries))
	for i, e := range entries {
		ids[i] = e.Key[8:]
	}
	err = st.GetMany(store.Runs, ids, func(i int, v []byte) error {
		e, id := entries[i], ids[i]
		if p.runs.Get(string(id)) != nil {
			return nil // back in memory (a late call, a resume): not gone
		}
		var b storedEnd
		switch {
		case v != nil && decode(v, &b) == nil && b.expiredAt(cutoff):
			expired = append(expired, expiredRun{id: string(id), ownsAll: b.OwnsAll, entry: e.Key, owned: e.Value})
			return nil
		case v != nil && len(e.Value) > 1:
			// Stale, the run moved again since: the keys it wrote before
			// stay listed, in a record of store.Owned of their own.
			k := append(append(append(make([]byte, 0, len(e.Key)+2), id...), 0, 'e'), e.Key[:8]...)
			ops = append(ops, store.Op{Bucket: store.Owned, Key: k, Value: e.Value})
		}
		// Otherwise stale: the run is gone, or moved or ended since (its
		// later end has an entry of its own).
		ops = append(ops, store.Op{Bucket: store.Ended, Key: e.Key})
		return nil
	})
	return expired, ops, err
}

// indexEnded lists in store.Ended every ended run of a store whose index
// is not complete, reading every snapshot once, and returns the expired
// ones. A run that ended since the index was kept has its entry, with the
// keys it lists, kept as it is. Expired runs get theirs too, deleted with
// them: if the sweep fails on the way, the next one finds them by it.
func (p *Pipeline) indexEnded(cutoff time.Time) ([]expiredRun, error) {
	st := p.opts.Store
	var expired []expiredRun
	// The entries' keys, end to end (ends[i] is where the i-th ends): a
	// few dozen bytes a stored run, rather than an op and a key each.
	var keys []byte
	var ends []int
	var expiredAt []int // the entries of the expired runs
	err := st.Scan(store.Runs, func(k, v []byte) error {
		var b storedEnd
		if decode(v, &b) != nil || !b.Run.State.Final() {
			return nil
		}
		end := b.Run.Ended
		if end.IsZero() {
			end = cutoff // never expires (expiredAt); its entry goes as stale
		}
		keys = append(binary.BigEndian.AppendUint64(keys, uint64(end.UnixNano())), k...)
		ends = append(ends, len(keys))
		if b.expiredAt(cutoff) && len(expired) < storeSweepMax && p.runs.Get(string(k)) == nil {
			expired = append(expired, expiredRun{id: string(k), ownsAll: b.OwnsAll})
			expiredAt = append(expiredAt, len(ends)-1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	next := 0 // in expired
	batch := make([][]byte, 0, storeSweepBatch)
	for first := 0; first < len(ends); first += storeSweepBatch {
		batch = batch[:0]
		for i := first; i < min(first+storeSweepBatch, len(ends)); i++ {
			start := 0
			if i > 0 {
				start = ends[i-1]
			}
			batch = append(batch, keys[start:ends[i]:ends[i]])
		}
		var ops []store.Op
		err := st.GetMany(store.Ended, batch, func(j int, v []byte) error {
			key := batch[j]
			if next < len(expired) && expiredAt[next] == first+j {
				expired[next].entry, expired[next].owned = key, v
				next++
			}
			if v == nil {
				ops = append(ops, store.Op{Bucket: store.Ended, Key: key, Value: listedValue})
			}
			return nil
		})
		if err == nil && len(ops) > 0 {
			err = <-st.Apply(ops)
		}
		if err != nil {
			return nil, err
		}
	}
	return expired, nil
}

// forgetRuns adds to ops the deletes of everything the expired runs left in
// the store.
func (p *Pipeline) forgetRuns(expired []expiredRun, ops []store.Op) ([]store.Op, error) {
	st := p.opts.Store
	unlisted := map[string]bool{} // runs whose keys store.Owned may not all list
	var lineage [][]byte          // the expired runs' lineage keys, and whose
	var lineageOf []string
	for _, e := range expired {
		// With the run goes an entry of the list of unfinished runs that
		// the first listing left as the run ended (listUnfinished).
		ops = append(ops, store.Op{Bucket: store.Runs, Key: []byte(e.id)}, store.Op{Bucket: store.Unfinished, Key: []byte(e.id)},
			store.Op{Bucket: store.Ended, Key: e.entry})
		if !e.ownsAll {
			unlisted[e.id] = true
		}
		prefix := append([]byte(e.id), 0)
		for _, b := range []store.Bucket{store.Events, store.Idempotency} {
			err := st.ScanPrefix(b, prefix, func(k, _ []byte) error {
				ops = append(ops, store.Op{Bucket: b, Key: bytes.Clone(k)})
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		owned := [][]byte{e.owned}
		err := st.ScanPrefix(store.Owned, prefix, func(k, v []byte) error {
			ops = append(ops, store.Op{Bucket: store.Owned, Key: bytes.Clone(k)})
			owned = append(owned, bytes.Clone(v))
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, v := range owned {
			ownedKeys(v, func(b store.Bucket, key []byte) {
				if b == store.Lineage {
					lineage = append(lineage, bytes.Clone(key))
					lineageOf = append(lineageOf, e.id)
					return
				}
				ops = append(ops, store.Op{Bucket: b, Key: bytes.Clone(key)})
			})
		}
		if _, ok := p.book.(*accounting.MemBook); ok {
			ops = append(ops, store.Op{Bucket: store.Ledgers, Key: []byte(runLedgerPrefix + e.id)})
		}
	}
	// A lineage key points at the run that wrote it last: another run's
	// stays.
	err := st.GetMany(store.Lineage, lineage, func(i int, at []byte) error {
		if string(at) == lineageOf[i] {
			ops = append(ops, store.Op{Bucket: store.Lineage, Key: lineage[i]})
		}
		return nil
	})
	if err != nil || len(unlisted) == 0 {
		return ops, err
	}
	// Keys that point at a run begun before store.Owned was kept, found
	// from the other side.
	byValue := func(b store.Bucket, runOf func(v []byte) string) error {
		return st.Scan(b, func(k, v []byte) error {
			if unlisted[runOf(v)] {
				ops = append(ops, store.Op{Bucket: b, Key: bytes.Clone(k)})
			}
			return nil
		})
	}
	runIDField := func(v []byte) string {
		var rec struct {
			RunID string `json:"run_id"`
		}
		_ = decode(v, &rec)
		return rec.RunID
	}
	if err := byValue(store.Lineage, func(v []byte) string { return string(v) }); err != nil {
		return nil, err
	}
	for _, b := range []store.Bucket{store.Approvals, store.Blobs} {
		if err := byValue(b, runIDField); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// applyAll writes ops in order, in commits of at most batch ops: a crash
// between two leaves the earlier ones written, the later ones not.
func applyAll(st store.Store, ops []store.Op, batch int) error {
	for len(ops) > 0 {
		n := min(len(ops), batch)
		if err := <-st.Apply(ops[:n:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}
