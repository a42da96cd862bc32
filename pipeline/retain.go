package pipeline

import (
	"bytes"
	"context"
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

	expired := map[string]bool{}
	var ops []store.Op
	err := st.Scan(store.Runs, func(k, v []byte) error {
		if len(expired) >= storeSweepMax {
			return nil
		}
		var b struct {
			Run struct {
				State runstate.State `json:"state"`
				Ended time.Time      `json:"ended"`
			} `json:"run"`
		}
		if decode(v, &b) != nil || !b.Run.State.Final() || b.Run.Ended.IsZero() || !b.Run.Ended.Before(cutoff) {
			return nil
		}
		id := string(k)
		if p.runs.Get(id) != nil {
			return nil // back in memory (a late call, a resume): not gone
		}
		expired[id] = true
		// With the run goes an entry of the list of unfinished runs that
		// the first listing left as the run ended (listUnfinished).
		ops = append(ops, store.Op{Bucket: store.Runs, Key: []byte(id)}, store.Op{Bucket: store.Unfinished, Key: []byte(id)})
		return nil
	})
	if err != nil || len(expired) == 0 {
		return 0, err
	}
	var ledgers []string
	for id := range expired {
		prefix := append([]byte(id), 0)
		for _, b := range []store.Bucket{store.Events, store.Idempotency} {
			err := st.ScanPrefix(b, prefix, func(k, _ []byte) error {
				ops = append(ops, store.Op{Bucket: b, Key: bytes.Clone(k)})
				return nil
			})
			if err != nil {
				return 0, err
			}
		}
		ledgers = append(ledgers, runLedgerPrefix+id)
	}
	if _, ok := p.book.(*accounting.MemBook); ok {
		for _, key := range ledgers {
			ops = append(ops, store.Op{Bucket: store.Ledgers, Key: []byte(key)})
		}
	}
	// Keys that point at an expired run from the other side.
	byValue := func(b store.Bucket, runOf func(v []byte) string) error {
		return st.Scan(b, func(k, v []byte) error {
			if expired[runOf(v)] {
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
		return 0, err
	}
	for _, b := range []store.Bucket{store.Approvals, store.Blobs} {
		if err := byValue(b, runIDField); err != nil {
			return 0, err
		}
	}
	for len(ops) > 0 {
		n := min(len(ops), storeSweepBatch)
		if err := <-st.Apply(ops[:n]); err != nil {
			return 0, err
		}
		ops = ops[n:]
	}
	if err := p.book.Forget(context.Background(), ledgers); err != nil {
		return 0, err
	}
	p.log.Info("stored runs past retention deleted", "runs", len(expired), "retention", p.opts.StoreRetention.String())
	return len(expired), nil
}
