package runtx

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// Runs is what a transaction asks of the pipeline that owns the runs.
type Runs interface {
	// Refresh replaces the run's state in memory with v, its stored
	// snapshot, when v is newer. The caller holds r's mutex.
	Refresh(r *runstate.Run, v []byte) error
	// Ops is what a commit of the run writes: its snapshot and the writes
	// queued with it; nil when there is nothing to write (no store). The
	// caller holds r's mutex.
	Ops(r *runstate.Run) []store.Op
	// Later hands the run's queued writes to the store's next commit,
	// leaving the run itself to a later commit. The caller holds r's mutex.
	Later(r *runstate.Run)
	// Soon leaves a new run to be written whole by the end of its first
	// call, or shortly after when that call takes long. The caller holds
	// r's mutex.
	Soon(r *runstate.Run)
}

// Config is what a Manager works with.
type Config struct {
	// Store holds the runs; nil keeps them in memory only.
	Store store.Store
	// Lock, with Store, means several replicas share the runs: each
	// transaction takes the run's lock and catches up with the store.
	Lock Lock
	Runs Runs
	Log  *slog.Logger
	Now  func() time.Time
	// LedgerPrefix starts the key of a run's own ledger (then the run id),
	// which a LockReader reads when a transaction asks for it.
	LedgerPrefix string
	// Wait bounds how long a call waits for its commit.
	Wait time.Duration
}

// Manager opens transactions on runs.
type Manager struct{ cfg Config }

// New is a Manager of cfg.
func New(cfg Config) *Manager { return &Manager{cfg: cfg} }

// Shared reports that several replicas share runs through the store.
func (m *Manager) Shared() bool { return m.cfg.Lock != nil && m.cfg.Store != nil }

// Need is what a transaction asks of the run's lock.
type Need struct {
	// Ledger: the lock reads the run's own ledger too (LockReader), for
	// admission (Tx.Ledger).
	Ledger bool
	// Rider is a settlement to send in the lock's round trip, when the
	// lock can carry one (CarriesRider).
	Rider accounting.Rider
	// GoOn opens the transaction even when the lock or the refresh fails
	// (a settlement: the book is the source of truth for money, and the
	// run's state catches up at its next call); Open then returns the
	// failure with the open transaction, for the caller to log.
	GoOn bool
}

// StaleError is a refresh that failed: the run's lock was taken, but its
// stored state could not be read.
type StaleError struct{ Err error }

func (e StaleError) Error() string { return e.Err.Error() }
func (e StaleError) Unwrap() error { return e.Err }

// IsStale reports whether err is a failed refresh rather than a lock that
// could not be taken.
func IsStale(err error) bool {
	var s StaleError
	return errors.As(err, &s)
}

// Tx is a transaction on one run: from Open to Commit the caller holds
// the run's lock (across replicas) and its mutex, and the run is as new
// as the store's. A Tx is a value: it costs no allocation.
type Tx struct {
	m      *Manager
	r      *runstate.Run
	unlock func()
	pre    prefetched
}

// Open takes the run's lock across replicas, then its mutex, and catches
// the run up with its stored state (refresh). On a failure nothing is
// held and the error says which step failed (IsStale), unless need.GoOn.
func (m *Manager) Open(ctx context.Context, r *runstate.Run, need Need) (Tx, error) {
	unlock, pre, err := m.lock(ctx, r.ID, need)
	if err != nil {
		if !need.GoOn {
			return Tx{}, err
		}
		unlock = nothingToUnlock
	}
	return m.open(r, unlock, pre, err, need)
}

// OpenNamed opens a transaction on the run named id that this replica may
// not hold yet: the run's lock is taken first, and find gives the run from
// what the lock read of it — its stored snapshot (nil when none is
// stored), when read; else find reads it itself. find returns a run or an
// error. A run found so is then
// opened as Open opens it, with no read of the store of its own: the
// snapshot was read once, in the lock's round trip. need.GoOn is not
// honoured: without the run's lock there is no run to go on with.
func (m *Manager) OpenNamed(ctx context.Context, id string, need Need, find func(snapshot []byte, read bool) (*runstate.Run, error)) (Tx, *runstate.Run, error) {
	unlock, pre, err := m.lock(ctx, id, need)
	if err != nil {
		return Tx{}, nil, err
	}
	r, err := find(pre.snapshot, pre.read)
	if err != nil {
		unlock()
		return Tx{}, nil, StaleError{err}
	}
	need.GoOn = false
	tx, err := m.open(r, unlock, pre, nil, need)
	return tx, r, err
}

// open takes r's mutex once its lock is had (or, with need.GoOn, not had:
// err) and catches r up with its stored state.
func (m *Manager) open(r *runstate.Run, unlock func(), pre prefetched, err error, need Need) (Tx, error) {
	r.Lock()
	if rerr := m.refresh(r, pre); rerr != nil {
		if !need.GoOn {
			r.Unlock()
			unlock()
			return Tx{}, StaleError{rerr}
		}
		err = errors.Join(err, StaleError{rerr})
	}
	return Tx{m: m, r: r, unlock: unlock, pre: pre}, err
}

// Refresh catches the run up with its stored state, read from the store,
// when replicas share it. The caller holds r's mutex, not the run's lock:
// a read of the run as it stands (the control plane's).
func (m *Manager) Refresh(r *runstate.Run) error { return m.refresh(r, prefetched{}) }

// refresh loads the run's latest persisted version when another replica
// may have moved it: from pre when the lock read it, else from the store.
// The caller holds r's mutex.
func (m *Manager) refresh(r *runstate.Run, pre prefetched) error {
	if !m.Shared() {
		return nil
	}
	v := pre.snapshot
	if !pre.read {
		var err error
		if v, err = m.cfg.Store.Get(store.Runs, []byte(r.ID)); err != nil {
			return err
		}
	}
	if v == nil {
		return nil
	}
	return m.cfg.Runs.Refresh(r, v)
}

// Ledger is the run's own ledger as the lock read it (Need.Ledger), or nil.
func (tx *Tx) Ledger() *accounting.LedgerSnapshot { return tx.pre.ledger }

// LedgerRead reports that the lock read the run's own ledger (Need.Ledger):
// a nil Ledger then means that the ledger did not exist when the lock was
// taken.
func (tx *Tx) LedgerRead() bool { return tx.pre.ledgerRead }

// Close ends a transaction that writes nothing of its own: it lets go of
// the run's mutex and lock.
func (tx *Tx) Close() {
	tx.r.Unlock()
	tx.unlock()
}

// Mode is how a transaction's writes reach the store.
type Mode uint8

// Commit modes.
const (
	// Wait commits the run now; Land waits for the commit before the
	// lock goes, so the next replica to take it, and the agent that hears
	// the answer, find it stored. The commit lets go of the lock itself
	// when the lock can be let go so (LockReader's release).
	Wait Mode = iota
	// Behind commits the run as Wait does but away from the caller, which
	// goes on (a forwarded call) and lands the commit at the call's end,
	// before it takes the lock again. A store that cannot commit away from
	// its caller commits as Wait.
	Behind
	// Send commits the run now; nobody waits for it.
	Send
	// Later hands the run's queued writes to the store's next commit; the
	// run itself goes with a later commit (the call's end).
	Later
	// Soon leaves a new run to be written whole by its call's end, or
	// shortly after (Runs.Soon).
	Soon
)

// behindApplier is a store that commits a batch away from the caller
// (store.GroupCommitter.ApplyBehind).
type behindApplier interface {
	ApplyBehind(ops []store.Op) <-chan error
}

// Commit writes what the transaction changed as mode says and lets go of
// the run's mutex. The commit it returns is landed by the caller (Land):
// at once, or for Behind at the end of the call it goes on with.
func (tx *Tx) Commit(mode Mode) Pending {
	m, r := tx.m, tx.r
	c := Pending{m: m, id: r.ID, unlock: tx.unlock}
	switch mode {
	case Behind:
		if ab, ok := m.cfg.Store.(behindApplier); ok {
			if ops, carried := tx.releasingOps(); ops != nil {
				c.saved, c.carried, c.wait, c.behind = ab.ApplyBehind(ops), carried, true, true
				break
			}
		}
		c.saved, c.carried, c.wait = tx.applyReleasing()
	case Wait:
		c.saved, c.carried, c.wait = tx.applyReleasing()
	case Send:
		c.saved = m.Send(r)
	case Later:
		m.cfg.Runs.Later(r)
	case Soon:
		m.cfg.Runs.Soon(r)
	}
	r.Unlock()
	return c
}

// releasingOps is what the commit writes, with the lock's release after
// it when the lock can be let go so (carried).
func (tx *Tx) releasingOps() (ops []store.Op, carried bool) {
	ops = tx.m.cfg.Runs.Ops(tx.r)
	if ops != nil && tx.pre.release.Bucket == store.LockRelease {
		ops, carried = append(ops, tx.pre.release), true
	}
	return ops, carried
}

func (tx *Tx) applyReleasing() (saved <-chan error, carried, wait bool) {
	ops, carried := tx.releasingOps()
	if ops == nil {
		return nil, false, true
	}
	return tx.m.cfg.Store.Apply(ops), carried, true
}

// Send commits the run now and returns the commit's channel (nil when
// there is nothing to write), for Wait. The caller holds r's mutex, and
// the run's lock when replicas share the store.
func (m *Manager) Send(r *runstate.Run) <-chan error {
	ops := m.cfg.Runs.Ops(r)
	if ops == nil {
		return nil
	}
	return m.cfg.Store.Apply(ops)
}

// Pending is a transaction's commit, to be landed once. Its zero value
// is no commit: Land does nothing.
type Pending struct {
	m       *Manager
	id      string
	saved   <-chan error
	carried bool // the commit lets go of the run's lock
	wait    bool // Land waits for the commit
	behind  bool
	unlock  func()
}

// Behind reports that the commit goes on away from the caller (Behind),
// to be landed at the end of the call that goes on.
func (c *Pending) Behind() bool { return c.behind }

// Landed lands the commit now unless it goes on behind the call
// (Behind), and returns what is left to land at the call's end: that
// commit, or none.
func (c Pending) Landed() Pending {
	if c.behind {
		return c
	}
	c.Land()
	return Pending{}
}

// Land waits (bounded) for the commit when its mode waits, and lets go
// of the run's lock unless the commit did.
func (c *Pending) Land() {
	if c.unlock == nil {
		return
	}
	if !c.wait || !c.m.Wait(c.saved, c.id) || !c.carried {
		c.unlock()
	}
	c.unlock = nil
}

// Wait blocks until a commit is done (bounded by Config.Wait) and reports
// whether it committed; a failure is logged, and readiness reports it.
func (m *Manager) Wait(ch <-chan error, runID string) (committed bool) {
	if ch == nil {
		return false
	}
	var err error
	select {
	case err = <-ch: // committed inline by Apply (the common case): no timer
	default:
		t := time.NewTimer(m.cfg.Wait)
		select {
		case err = <-ch:
			t.Stop()
		case <-t.C:
			m.cfg.Log.Error("persisting run timed out", "run_id", runstate.NameOf(runID), "tenant", runstate.TenantOf(runID))
			return false
		}
	}
	if err != nil {
		m.cfg.Log.Error("persisting run failed", "run_id", runstate.NameOf(runID), "tenant", runstate.TenantOf(runID), "err", err)
	}
	return err == nil
}
