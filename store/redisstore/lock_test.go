package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/redisstore/redistest"
)

// openReplicas opens n Stores (n replicas: n clients) on one fresh prefix.
func openReplicas(t *testing.T, n int) []*Store {
	t.Helper()
	prefix := redistest.Prefix(t)
	var out []*Store
	for range n {
		s, err := Open(redisURL, prefix)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
		t.Cleanup(func() { s.Close() })
	}
	t.Cleanup(func() { redistest.Drop(redisURL, prefix) })
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

	unlock, release, snap, err := a.LockRead(ctx, "r-none", nil)
	if err != nil || snap != nil {
		t.Fatalf("a run never stored: snapshot %q, %v", snap, err)
	}
	unlock()

	commit(t, a, store.Op{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("v1")})
	unlock, release, snap, err = a.LockRead(ctx, "r1", nil)
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
	_, _, snap, err = b.LockRead(ctx, "r1", nil)
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
	_, release, _, err := a.LockRead(ctx, "r1", nil)
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
