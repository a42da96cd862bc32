package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/haltline/haltline/store"
)

// Store is an embedded store: one that tells whether it was left open by
// the process before (store.Bolt, pebblestore.Store).
type Store interface {
	store.Store
	Recovered() bool
}

// Open opens (or creates) the store in dir.
type Open func(dir string) (Store, error)

// Run runs the suite.
func Run(t *testing.T, open Open) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"ConcurrentApplyAndReopen", concurrentApplyAndReopen},
		{"Reads", reads},
		{"GetMany", getMany},
		{"Later", later},
		{"CancelLater", cancelLater},
		{"UnknownBucket", unknownBucket},
		{"Crash", crash},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, open)
		})
	}
}

func mustOpen(t *testing.T, open Open, dir string) Store {
	t.Helper()
	s, err := open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustApply(t *testing.T, s store.Store, ops ...store.Op) {
	t.Helper()
	if err := <-s.Apply(ops); err != nil {
		t.Fatal(err)
	}
}

func put(b store.Bucket, k, v string) store.Op {
	return store.Op{Bucket: b, Key: []byte(k), Value: []byte(v)}
}

func del(b store.Bucket, k string) store.Op { return store.Op{Bucket: b, Key: []byte(k)} }

func collect(t *testing.T, s store.Store, b store.Bucket, prefix []byte) string {
	t.Helper()
	var out []string
	err := s.ScanPrefix(b, prefix, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%q", out)
}

func get(t *testing.T, s store.Store, b store.Bucket, k string) []byte {
	t.Helper()
	v, err := s.Get(b, []byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Concurrent commits all land; a closed store refuses Apply, and a
// reopened one has every commit, a delete included.
func concurrentApplyAndReopen(t *testing.T, open Open) {
	dir := t.TempDir()
	s := mustOpen(t, open, dir)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			run := fmt.Sprintf("r-%03d", i)
			ops := []store.Op{put(store.Runs, run, "run"), {Bucket: store.Events, Key: store.EventKey(run, 1), Value: []byte("ev")}}
			if err := <-s.Apply(ops); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mustApply(t, s, del(store.Runs, "r-000"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-s.Apply(nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("apply after close: %v", err)
	}
	if err := s.Healthy(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("healthy after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	s = mustOpen(t, open, dir)
	defer s.Close()
	if s.Recovered() {
		t.Fatal("a store closed says it recovered")
	}
	if err := s.Healthy(); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := s.Scan(store.Runs, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 199 {
		t.Fatalf("%d runs after reopen, want 199", n)
	}
	if got := collect(t, s, store.Events, []byte("r-007\x00")); got != `["r-007\x00\x00\x00\x00\x00\x00\x00\x00\x01=ev"]` {
		t.Fatalf("events of r-007: %s", got)
	}
}

// Get, Scan and ScanPrefix see the latest write of each key, in key order,
// deletes hiding it, each bucket its own keys; a prefix is bytes, not a
// run id.
func reads(t *testing.T, open Open) {
	s := mustOpen(t, open, t.TempDir())
	defer s.Close()
	mustApply(t, s, put(store.Runs, "a", "1"), put(store.Runs, "c", "1"), put(store.Runs, "e", "1"),
		put(store.Lineage, "a", "x"), put(store.Reservations, "b", "y"))
	mustApply(t, s, put(store.Runs, "b", "2"), put(store.Runs, "c", "2"), del(store.Runs, "e"), put(store.Runs, "f", "2"))
	mustApply(t, s, put(store.Runs, "b", "3"), del(store.Runs, "a"), del(store.Runs, "never"))
	if got := collect(t, s, store.Runs, nil); got != `["b=3" "c=2" "f=2"]` {
		t.Fatalf("scan of runs: %s", got)
	}
	if v := get(t, s, store.Runs, "c"); string(v) != "2" {
		t.Fatalf("get c = %q", v)
	}
	if v := get(t, s, store.Runs, "e"); v != nil {
		t.Fatalf("deleted e = %q", v)
	}
	if v := get(t, s, store.Ledgers, "a"); v != nil {
		t.Fatalf("a key of no bucket = %q", v)
	}
	if v := get(t, s, store.Lineage, "a"); string(v) != "x" {
		t.Fatalf("lineage a = %q", v)
	}
	var all []string
	err := s.Scan(store.Owned, func(k, v []byte) error { all = append(all, string(k)); return nil })
	if err != nil || all != nil {
		t.Fatalf("an empty bucket: %q, %v", all, err)
	}

	mustApply(t, s, put(store.Events, "r1\x00a", "1"), put(store.Events, "r1\x00b", "1"), put(store.Events, "r10\x00a", "1"),
		put(store.Events, "r1", "1"), put(store.Events, "r1x", "1"), put(store.Events, "r2\x00a", "1"),
		put(store.Events, "r1\x00\xff", "1"), put(store.Events, "r1\x01", "1"))
	if got := collect(t, s, store.Events, []byte("r1\x00")); got != `["r1\x00a=1" "r1\x00b=1" "r1\x00\xff=1"]` {
		t.Fatalf("scan of r1's events: %s", got)
	}
	if got := collect(t, s, store.Events, []byte("r1")); got != `["r1=1" "r1\x00a=1" "r1\x00b=1" "r1\x00\xff=1" "r1\x01=1" "r10\x00a=1" "r1x=1"]` {
		t.Fatalf("scan of the prefix r1: %s", got)
	}
	stop := errors.New("stop")
	n := 0
	if err := s.Scan(store.Events, func(k, v []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("a scan whose fn fails: %d calls, %v", n, err)
	}
}

// GetMany reads as Get does, each key in the order given, over more keys
// than one batch, and fn may use the store.
func getMany(t *testing.T, open Open) {
	s := mustOpen(t, open, t.TempDir())
	defer s.Close()
	n := store.GetManyBatch*2 + 7
	var keys [][]byte
	var first, second []store.Op
	for i := range n {
		k := fmt.Sprintf("r%04d", (i*7919)%n) // not in key order
		keys = append(keys, []byte(k))
		switch i % 4 {
		case 0:
			first = append(first, put(store.Runs, k, "first"))
		case 1:
			first = append(first, put(store.Runs, k, "first"))
			second = append(second, put(store.Runs, k, "second"))
		case 2:
			first = append(first, put(store.Runs, k, "first"))
			second = append(second, del(store.Runs, k))
		}
	}
	mustApply(t, s, first...)
	mustApply(t, s, second...)
	next := 0
	err := s.GetMany(store.Runs, keys, func(i int, v []byte) error {
		want := get(t, s, store.Runs, string(keys[i]))
		if i != next || !bytes.Equal(v, want) || (v == nil) != (i%4 >= 2) {
			t.Fatalf("call %d: key %d = %q, Get gives %q", next, i, v, want)
		}
		next++
		return nil
	})
	if err != nil || next != n {
		t.Fatalf("%d of %d keys, %v", next, n, err)
	}
}

// Later ops are committed on their own, or ahead of the next Apply's in
// its commit; Close commits those still waiting.
func later(t *testing.T, open Open) {
	dir := t.TempDir()
	s := mustOpen(t, open, dir)
	s.Later([]store.Op{put(store.Reservations, "a", "1")})
	waitFor(t, "a Later op committed on its own", func() bool { return get(t, s, store.Reservations, "a") != nil })
	s.Later([]store.Op{put(store.Reservations, "b", "1"), put(store.Runs, "r", "1")})
	mustApply(t, s, del(store.Reservations, "b"), put(store.Runs, "r", "2"))
	if v, r := get(t, s, store.Reservations, "b"), get(t, s, store.Runs, "r"); v != nil || string(r) != "2" {
		t.Fatalf("a Later op after the Apply that followed it: b = %q, r = %q", v, r)
	}
	s.Later([]store.Op{put(store.Reservations, "c", "1")})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, open, dir)
	defer s.Close()
	if got := collect(t, s, store.Reservations, nil); got != `["a=1" "c=1"]` {
		t.Fatalf("reservations after reopen: %s", got)
	}
}

// CancelLater drops a Later op of that bucket and key, once.
func cancelLater(t *testing.T, open Open) {
	s := mustOpen(t, open, t.TempDir())
	defer s.Close()
	// A commit running while the ops are queued may take them: the check
	// holds for an attempt where none did.
	for attempt := 0; ; attempt++ {
		key := fmt.Sprint("hold-", attempt)
		s.Later([]store.Op{put(store.Reservations, key, "1"), put(store.Runs, key, "1")})
		if s.CancelLater(store.Runs, []byte("other")) {
			t.Fatal("cancelled a key never queued")
		}
		if !s.CancelLater(store.Reservations, []byte(key)) {
			if attempt == 100 {
				t.Fatal("no Later op was ever cancelled")
			}
			continue
		}
		if s.CancelLater(store.Reservations, []byte(key)) {
			t.Fatal("cancelled twice")
		}
		mustApply(t, s)
		if v, r := get(t, s, store.Reservations, key), get(t, s, store.Runs, key); v != nil || string(r) != "1" {
			t.Fatalf("after the cancel: reservation %q, run %q", v, r)
		}
		return
	}
}

// A bucket the store does not have fails the commit as a whole, and the
// store says so until a commit succeeds.
func unknownBucket(t *testing.T, open Open) {
	s := mustOpen(t, open, t.TempDir())
	defer s.Close()
	err := <-s.Apply([]store.Op{put(store.Runs, "r", "1"), {Bucket: store.LockRelease, Key: []byte("lock"), Value: []byte("token")}})
	if err == nil {
		t.Fatal("a commit to the lock-release bucket succeeded")
	}
	if v := get(t, s, store.Runs, "r"); v != nil {
		t.Fatalf("a failed commit wrote %q", v)
	}
	if s.Healthy() == nil {
		t.Fatal("healthy after a failed commit")
	}
	if _, err := s.Get(store.Bucket("nope"), []byte("r")); err == nil {
		t.Fatal("a read of an unknown bucket succeeded")
	}
	mustApply(t, s, put(store.Runs, "r", "1"))
	if err := s.Healthy(); err != nil {
		t.Fatal(err)
	}
}

// A copy of the directory taken while the store is open is what a killed
// process leaves: opened, it has every commit acknowledged before the
// copy, and says it recovered.
func crash(t *testing.T, open Open) {
	dir := t.TempDir()
	s := mustOpen(t, open, dir)
	defer s.Close()
	for i := range 50 {
		mustApply(t, s, put(store.Runs, "r1", fmt.Sprint("v", i)), put(store.Events, fmt.Sprintf("r1\x00%02d", i), "e"))
	}
	mustApply(t, s, del(store.Events, "r1\x0000"))
	killed := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(killed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, open, killed)
	defer r.Close()
	if !r.Recovered() {
		t.Fatal("a store left open does not say it recovered")
	}
	if v := get(t, r, store.Runs, "r1"); string(v) != "v49" {
		t.Fatalf("run after the crash: %q", v)
	}
	n := 0
	if err := r.ScanPrefix(store.Events, []byte("r1\x00"), func(k, v []byte) error { n++; return nil }); err != nil || n != 49 {
		t.Fatalf("%d events after the crash, want 49 (%v)", n, err)
	}
}
