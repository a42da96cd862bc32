package runtx

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// fakeStore commits every batch at once with err, recording each, and
// commits behind its caller when behind is set.
type fakeStore struct {
	store.Store
	err     error
	applied [][]store.Op
	behind  [][]store.Op
	stored  []byte
	getErr  error
}

func (s *fakeStore) Apply(ops []store.Op) <-chan error {
	s.applied = append(s.applied, ops)
	ch := make(chan error, 1)
	ch <- s.err
	return ch
}

func (s *fakeStore) Get(store.Bucket, []byte) ([]byte, error) { return s.stored, s.getErr }

type behindStore struct{ *fakeStore }

func (s behindStore) ApplyBehind(ops []store.Op) <-chan error {
	s.behind = append(s.behind, ops)
	ch := make(chan error, 1)
	ch <- s.err
	return ch
}

// fakeLock is a LockReader whose release goes in the commit; it counts the
// unlocks made outside a commit.
type fakeLock struct {
	err      error
	snapshot []byte
	unlocks  int
	ledger   string
	// keep: the lock cannot be let go in a commit (no release op).
	keep bool
}

func (l *fakeLock) Lock(context.Context, string) (func(), error) { panic("LockRead is used") }

func (l *fakeLock) LockRead(_ context.Context, runID, ledger string, _ time.Time) (func(), store.Op, []byte, *accounting.LedgerSnapshot, error) {
	l.ledger = ledger
	if l.err != nil {
		return nil, store.Op{}, nil, nil, l.err
	}
	release := store.Op{Bucket: store.LockRelease, Key: []byte(runID)}
	if l.keep {
		release = store.Op{}
	}
	return func() { l.unlocks++ }, release, l.snapshot, &accounting.LedgerSnapshot{}, nil
}

// fakeRuns writes one op a commit and records refreshes.
type fakeRuns struct{ refreshed [][]byte }

func (f *fakeRuns) Refresh(_ *runstate.Run, v []byte) error {
	f.refreshed = append(f.refreshed, v)
	if string(v) == "bad" {
		return errors.New("cannot decode")
	}
	return nil
}
func (f *fakeRuns) Ops(r *runstate.Run) []store.Op {
	return []store.Op{{Bucket: store.Runs, Key: []byte(r.ID), Value: []byte("{}")}}
}
func (f *fakeRuns) Later(*runstate.Run) {}
func (f *fakeRuns) Soon(*runstate.Run)  {}

func manager(st store.Store, l Lock, runs Runs) *Manager {
	return New(Config{Store: st, Lock: l, Runs: runs, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		LedgerPrefix: "run:", Wait: time.Second})
}

func newRun() *runstate.Run {
	reg := runstate.NewRegistry()
	r, _ := reg.GetOrCreate(runstate.Identity{ID: "r1"})
	return r
}

// A commit that carries the lock's release lets go of the lock: no unlock
// of its own; one that fails, or cannot carry it, unlocks, so the run is
// never left locked.
func TestCommitWaitCarriesTheRelease(t *testing.T) {
	for _, tc := range []struct{ fail, keep bool }{{false, false}, {true, false}, {false, true}} {
		fail := tc.fail
		st, l, runs := &fakeStore{}, &fakeLock{snapshot: []byte("v"), keep: tc.keep}, &fakeRuns{}
		if fail {
			st.err = errors.New("down")
		}
		m := manager(st, l, runs)
		r := newRun()
		tx, err := m.Open(context.Background(), r, Need{Ledger: true})
		if err != nil {
			t.Fatal(err)
		}
		if l.ledger != "run:r1" || tx.Ledger() == nil || len(runs.refreshed) != 1 {
			t.Fatalf("lock read ledger %q, ledger %v, refreshed %d", l.ledger, tx.Ledger(), len(runs.refreshed))
		}
		c := tx.Commit(Wait)
		if !r.TryLock() {
			t.Fatal("Commit left the run's mutex taken")
		}
		r.Unlock()
		c.Land()
		c.Land() // once only
		ops := st.applied[0]
		if last := ops[len(ops)-1]; (last.Bucket == store.LockRelease) == tc.keep {
			t.Fatalf("keep %v: the commit's ops %v", tc.keep, ops)
		}
		want := 0
		if fail || tc.keep {
			want = 1
		}
		if l.unlocks != want {
			t.Fatalf("%+v: %d unlocks, want %d", tc, l.unlocks, want)
		}
	}
}

// A commit behind the call is left to land; Landed lands any other at once.
func TestCommitBehindIsLandedLater(t *testing.T) {
	st, l := behindStore{&fakeStore{}}, &fakeLock{}
	m := manager(st, l, &fakeRuns{})
	tx, err := m.Open(context.Background(), newRun(), Need{})
	if err != nil {
		t.Fatal(err)
	}
	c := tx.Commit(Behind).Landed()
	if !c.Behind() || len(st.behind) != 1 || len(st.applied) != 0 {
		t.Fatalf("behind %v, %d behind, %d applied", c.Behind(), len(st.behind), len(st.applied))
	}
	c.Land()
	if l.unlocks != 0 {
		t.Fatalf("%d unlocks of a lock the commit let go", l.unlocks)
	}

	// A store that cannot commit behind its caller commits in line.
	plain := &fakeStore{}
	m = manager(plain, &fakeLock{}, &fakeRuns{})
	tx, _ = m.Open(context.Background(), newRun(), Need{})
	if c := tx.Commit(Behind).Landed(); c.Behind() || len(plain.applied) != 1 {
		t.Fatalf("behind %v, %d applied", c.Behind(), len(plain.applied))
	}
}

// A refresh that fails holds nothing and says so; a settlement's
// transaction goes on whatever fails.
func TestOpenFailures(t *testing.T) {
	st, l := &fakeStore{}, &fakeLock{snapshot: []byte("bad")}
	m := manager(st, l, &fakeRuns{})
	r := newRun()
	if _, err := m.Open(context.Background(), r, Need{}); !IsStale(err) {
		t.Fatalf("err %v, want a stale one", err)
	}
	if !r.TryLock() || l.unlocks != 1 {
		t.Fatalf("a failed refresh kept the run's mutex or lock (%d unlocks)", l.unlocks)
	}
	r.Unlock()

	l = &fakeLock{err: errors.New("lock down")}
	st.stored = []byte("v")
	runs := &fakeRuns{}
	m = manager(st, l, runs)
	if _, err := m.Open(context.Background(), r, Need{}); err == nil || IsStale(err) {
		t.Fatalf("err %v, want the lock's", err)
	}
	tx, err := m.Open(context.Background(), r, Need{GoOn: true})
	if err == nil || len(runs.refreshed) != 1 || string(runs.refreshed[0]) != "v" {
		t.Fatalf("err %v, refreshed %q: want the lock's error and the run read from the store", err, runs.refreshed)
	}
	c := tx.Commit(Wait)
	c.Land()
	if !r.TryLock() {
		t.Fatal("run left locked")
	}
}
