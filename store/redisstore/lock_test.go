package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/store"
)

// openReplicas opens n Stores (n replicas: n clients) on one fresh prefix.
func openReplicas(t *testing.T, n int) []*Store {
	t.Helper()
	prefix := testPrefix(t)
	var out []*Store
	for range n {
		b, s, err := Open(redisURL, prefix)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
		t.Cleanup(func() { b.Close(); s.Close() })
	}
	t.Cleanup(func() { dropPrefix(prefix) })
	return out
}

// held reports whether another replica finds the run's lock taken: its
// Lock still waits after 100 ms.
func held(t *testing.T, s *Store, runID string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	unlock, err := s.Lock(ctx, runID)
	if err == nil {
		unlock()
		return false
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock: %v", err)
	}
	return true
}

func commit(t *testing.T, s *Store, ops ...store.Op) {
	t.Helper()
	if err := <-s.Apply(ops); err != nil {
		t.Fatal(err)
	}
}

// LockRead brings the run's stored snapshot with the lock, and a commit
// carrying its release op lets go of the lock after the commit's writes.
func TestLockReadReleasedByCommit(t *testing.T) {
	t.Parallel()
	rs := openReplicas(t, 2)
	a, b := rs[0], rs[1]
	ctx := context.Background()

	unlock, release, snap, _, err := a.LockRead(ctx, "r-none", "", time.Time{})
	if err != nil || snap != nil {
		t.Fatalf("a run never stored: snapshot %q, %v", snap, err)
	}
	unlock()

	commit(t, a, store.Op{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("v1")})
	unlock, release, snap, _, err = a.LockRead(ctx, "r1", "", time.Time{})
	if err != nil || string(snap) != "v1" {
		t.Fatalf("snapshot %q, %v", snap, err)
	}
	if release.Bucket != store.LockRelease {
		t.Fatalf("release op in bucket %q", release.Bucket)
	}
	if !held(t, b, "r1") {
		t.Fatal("another replica took a lock that is held")
	}
	commit(t, a, store.Op{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("v2")}, release)
	if held(t, b, "r1") {
		t.Fatal("the commit did not let go of the lock")
	}
	unlock() // a late unlock of a released lock is harmless
	_, _, snap, _, err = b.LockRead(ctx, "r1", "", time.Time{})
	if err != nil || string(snap) != "v2" {
		t.Fatalf("after the commit: snapshot %q, %v", snap, err)
	}
}

// A release whose lock expired and was taken by another replica leaves the
// new holder's lock alone.
func TestStaleReleaseKeepsNewHoldersLock(t *testing.T) {
	t.Parallel()
	rs := openReplicas(t, 3)
	a, b, c := rs[0], rs[1], rs[2]
	ctx := context.Background()
	_, release, _, _, err := a.LockRead(ctx, "r1", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// As if the lock's TTL ran out: the key goes, b takes the lock.
	if err := a.rdb.Del(ctx, string(release.Key)).Err(); err != nil {
		t.Fatal(err)
	}
	unlockB, err := b.Lock(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	commit(t, a, store.Op{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("late")}, release)
	if !held(t, c, "r1") {
		t.Fatal("a stale release deleted another replica's lock")
	}
	unlockB()
	if held(t, c, "r1") {
		t.Fatal("the holder's unlock did not let go")
	}
}

// LockRead reads the ledger named as Snapshot does, under the lock: nil
// when it does not exist.
func TestLockReadReadsTheLedger(t *testing.T) {
	t.Parallel()
	book, st := openOne(t)
	ctx := context.Background()
	unlock, _, _, state, err := st.LockRead(ctx, "r1", "run:r1", t0)
	if err != nil || state != nil {
		t.Fatalf("a ledger never made: %+v, %v", state, err)
	}
	unlock()
	spec := accounting.LedgerSpec{Key: "run:r1", Limit: accounting.Vector{Steps: 10, Cost: 1000}}
	ensure(t, book, spec)
	mustReserve(t, book, []string{"run:r1"}, accounting.Vector{Steps: 1, Cost: 300}, false, time.Minute, t0)
	h := mustReserve(t, book, []string{"run:r1"}, accounting.Vector{Steps: 1, Cost: 200}, false, time.Minute, t0)
	if err := book.Settle(ctx, h, accounting.Vector{Steps: 1, Cost: 150}, t0); err != nil {
		t.Fatal(err)
	}
	unlock, _, _, state, err = st.LockRead(ctx, "r1", "run:r1", t0)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	lim, spent, reserved := snapshot(t, book, "run:r1", t0)
	want := accounting.LedgerSnapshot{Limit: lim, Spent: spent, Reserved: reserved}
	if state == nil || *state != want || spent.Cost != 150 || reserved.Cost != 300 {
		t.Fatalf("LockRead read %+v, Snapshot %+v", state, want)
	}
}

// A settlement riding in a run lock's round trip (Book.SettleRider,
// Store.LockReadRiding) settles as SettleHeadroom does, once, and answers
// the headroom Headroom reads after it: with the lock had at once (one
// round trip for both), had after a wait (the retries leave the
// settlement out), with the server's scripts lost, and for a book on
// another client (its settlement goes out by itself at Result). Not
// parallel, as TestSettleHeadroomIsSettleThenHeadroom.
func TestSettleRiderInTheLock(t *testing.T) {
	a, b, s := openPair(t)
	keys := runAndTeam(t, a)
	rt := &roundTrips{}
	a.rdb.AddHook(rt)
	actual := accounting.Vector{Steps: 1, Tokens: 700, Cost: 100}
	for _, tc := range []struct {
		name        string
		held, flush bool
		book        *Book
	}{{"riding", false, false, a}, {"lock waited for", true, false, a}, {"scripts flushed", false, true, a}, {"another client", false, false, b}} {
		h := mustReserve(t, a, keys[:2], accounting.Vector{Steps: 1, Tokens: 1000, Cost: 200}, false, time.Minute, t0)
		// Loaded, else flushed (a test before may have flushed them).
		if err := settleScript.Load(ctx, a.rdb).Err(); err != nil {
			t.Fatal(err)
		}
		if tc.flush {
			if err := a.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		runID := "r-" + tc.name
		if tc.held {
			other, err := s.Lock(ctx, runID)
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(20*time.Millisecond, other)
		}
		rt.n.Store(0)
		rider := tc.book.SettleRider(h, actual, t0, keys, true)
		unlock, _, _, _, err := s.LockReadRiding(ctx, runID, "", t0, rider)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, read, err := rider.Result(ctx)
		if err != nil || !read {
			t.Fatalf("%s: %v, read %v", tc.name, err, read)
		}
		if n := rt.n.Load(); tc.name == "riding" && n != 1 {
			t.Errorf("%s: %d round trips for the lock and the settlement, want 1", tc.name, n)
		}
		unlock()
		want, err := b.Headroom(ctx, keys, true, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: headroom %+v, Headroom reads %+v", tc.name, got, want)
		}
		if err := b.Settle(ctx, h, actual, t0); err != nil {
			t.Fatal(err)
		}
		if again, _ := b.Headroom(ctx, keys, true, t0); again != want {
			t.Errorf("%s: a second settlement changed the headroom: %+v, then %+v", tc.name, want, again)
		}
	}
	_, spent, reserved := snapshot(t, b, "run", t0)
	if spent.Cost != 400 || spent.Steps != 4 || reserved != (accounting.Vector{}) {
		t.Errorf("run ledger spent %+v reserved %+v, want four settlements of %+v", spent, reserved, actual)
	}
}
