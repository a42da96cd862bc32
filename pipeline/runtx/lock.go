package runtx

import (
	"context"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// Lock serialises a run's transitions across replicas that share one
// store (Redis): each replica takes the run's lock, catches up with the
// run's latest persisted version, moves it, persists, and lets go.
type Lock interface {
	Lock(ctx context.Context, runID string) (unlock func(), err error)
}

// LockReader is a Lock that also reads, in the round trip that takes the
// lock, the run's stored snapshot (store.Runs, nil when there is none) —
// the refresh that follows every lock then costs no round trip of its own
// — and the state of the ledger named (nil when it does not exist), which
// admission reads next; and that can let go of the lock in the commit of
// what was written under it (release, an op of store.LockRelease), where
// unlock is a round trip of its own (Redis: each of these was one of about
// twelve a call).
type LockReader interface {
	LockRead(ctx context.Context, runID, ledger string, now time.Time) (unlock func(), release store.Op, snapshot []byte, state *accounting.LedgerSnapshot, err error)
}

// LockRiding is a LockReader whose lock's round trip can carry a
// settlement too (an accounting.Rider of the book's).
type LockRiding interface {
	LockReadRiding(ctx context.Context, runID, ledger string, now time.Time, rider accounting.Rider) (unlock func(), release store.Op, snapshot []byte, state *accounting.LedgerSnapshot, err error)
}

// prefetched is what a run's lock brought with it: the run's stored
// snapshot, for refresh, the state of the run's own ledger, for admission,
// and the op that lets go of the lock in a commit.
type prefetched struct {
	snapshot []byte
	read     bool                       // the lock read it (a nil snapshot: none stored)
	ledger   *accounting.LedgerSnapshot // the run's ledger, when asked for and it exists
	// ledgerRead: the lock read the run's ledger (a nil ledger: none exists)
	ledgerRead bool
	release    store.Op // Bucket store.LockRelease, or zero
}

// nothingToUnlock is the unlock of a run that needs no lock across
// replicas, or whose lock could not be taken by a transaction that goes on
// without it.
func nothingToUnlock() {}

// lock takes the run's lock when replicas share the store, with the run's
// stored snapshot when the lock can read it, the run's own ledger's state
// when need.Ledger asks for it, and need.Rider in the lock's round trip
// when the lock can carry one.
func (m *Manager) lock(ctx context.Context, runID string, need Need) (func(), prefetched, error) {
	if !m.Shared() {
		return nothingToUnlock, prefetched{}, nil
	}
	lr, ok := m.cfg.Lock.(LockReader)
	if !ok {
		unlock, err := m.cfg.Lock.Lock(ctx, runID)
		return unlock, prefetched{}, err
	}
	key := ""
	if need.Ledger {
		key = m.cfg.LedgerPrefix + runID
	}
	var unlock func()
	var release store.Op
	var v []byte
	var state *accounting.LedgerSnapshot
	var err error
	if rl, ok := lr.(LockRiding); ok && need.Rider != nil {
		unlock, release, v, state, err = rl.LockReadRiding(ctx, runID, key, m.cfg.Now(), need.Rider)
	} else {
		unlock, release, v, state, err = lr.LockRead(ctx, runID, key, m.cfg.Now())
	}
	return unlock, prefetched{snapshot: v, read: err == nil, ledger: state, ledgerRead: err == nil && key != "", release: release}, err
}

// CarriesRider reports whether a run's lock can carry a settlement in its
// round trip (Need.Rider).
func (m *Manager) CarriesRider() bool {
	_, ok := m.cfg.Lock.(LockRiding)
	return ok
}

// Guarded is a Lock that can also write a run without being taken
// (redisbook.RunLock on redisstore.Store): the write is applied, whole,
// only while no replica holds the run's lock and the run's stored
// snapshot is the one whose SHA-1 (hex) is stamp — the one this replica
// last wrote or read, so that nobody moved the run since; else nothing
// is written. rider, a settlement, goes in the same round trip whether or
// not the write is applied.
//
// WriteReserving writes so with a reservation instead of a settlement,
// applied only if the reservation was made and the run's own ledger
// (ledger) shows the spent and reserved steps (before the reservation)
// the writer counted.
type Guarded interface {
	WriteGuarded(ctx context.Context, runID, stamp string, ops []store.Op, rider accounting.Rider) (applied bool, err error)
	WriteReserving(ctx context.Context, runID, stamp string, ops []store.Op, res accounting.Prepared, ledger string, spent, reserved int64) (applied bool, err error)
	Guarded() bool
}

// Optimistic reports whether a run can be written without its lock
// (Guarded): replicas share the store and the lock can guard a write.
func (m *Manager) Optimistic() bool {
	g, ok := m.cfg.Lock.(Guarded)
	return ok && m.Shared() && g.Guarded()
}

// WriteGuarded writes what the caller changed on r, without the run's
// lock, as Guarded writes: the round trip that carries the settlement
// carries the run's commit too, and neither a lock nor a commit of its
// own is waited for. ops is what it tried to write (Runs.Ops), for the caller to take
// back into the run when the guard failed. The caller holds r's mutex.
func (m *Manager) WriteGuarded(ctx context.Context, r *runstate.Run, stamp string, rider accounting.Rider) (ops []store.Op, applied bool, err error) {
	ops = m.cfg.Runs.Ops(r)
	if ops == nil {
		return nil, false, nil
	}
	applied, err = m.cfg.Lock.(Guarded).WriteGuarded(ctx, r.ID, stamp, ops, rider)
	return ops, applied, err
}

// WriteReserving writes what the caller changed on r as WriteGuarded
// does, with a reservation ahead of it in the same round trip
// (Guarded.WriteReserving): a call's start with neither the run's lock
// nor a commit behind it. The caller holds r's mutex.
func (m *Manager) WriteReserving(ctx context.Context, r *runstate.Run, stamp string, res accounting.Prepared, ledger string, spent, reserved int64) (ops []store.Op, applied bool, err error) {
	ops = m.cfg.Runs.Ops(r)
	if ops == nil {
		return nil, false, nil
	}
	applied, err = m.cfg.Lock.(Guarded).WriteReserving(ctx, r.ID, stamp, ops, res, ledger, spent, reserved)
	return ops, applied, err
}
