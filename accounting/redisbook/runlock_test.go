package redisbook

import (
	"context"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/store"
)

// LockRead reads the ledger named as Snapshot does, under the lock: nil
// when it does not exist.
func TestLockReadReadsTheLedger(t *testing.T) {
	t.Parallel()
	book, st := openOne(t)
	lock := RunLock[store.Op]{Locker: st, Book: book}
	ctx := context.Background()
	unlock, _, _, state, err := lock.LockRead(ctx, "r1", "run:r1", t0)
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
	unlock, _, _, state, err = lock.LockRead(ctx, "r1", "run:r1", t0)
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
// RunLock.LockReadRiding) settles as SettleHeadroom does, once, and answers
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
		unlock, _, _, _, err := RunLock[store.Op]{Locker: s, Book: a}.LockReadRiding(ctx, runID, "", t0, rider)
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
