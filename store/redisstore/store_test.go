package redisstore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/haltline/haltline/store"
)

func scanAll(t *testing.T, s *Store, b store.Bucket, prefix []byte) (keys, vals []string) {
	t.Helper()
	err := s.ScanPrefix(b, prefix, func(k, v []byte) error {
		keys = append(keys, string(k))
		vals = append(vals, string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, vals
}

func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	ops := []store.Op{
		{Bucket: store.Runs, Key: []byte("r2"), Value: []byte("two")},
		{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("one")},
		{Bucket: store.Runs, Key: []byte("r3"), Value: []byte("three")},
		{Bucket: store.Runs, Key: []byte("r3"), Value: []byte("THREE")}, // in order: the last put wins
		{Bucket: store.Lineage, Key: []byte("x"), Value: []byte{}},
		{Bucket: store.Events, Key: store.EventKey("run", 2), Value: []byte("e2")},
		{Bucket: store.Events, Key: store.EventKey("run", 256), Value: []byte("e256")},
		{Bucket: store.Events, Key: store.EventKey("run", 1), Value: []byte("e1")},
		{Bucket: store.Events, Key: store.EventKey("run-b", 1), Value: []byte("b1")},
		{Bucket: store.Events, Key: store.EventKey("ru", 1), Value: []byte("u1")},
	}
	if err := <-s.Apply(ops); err != nil {
		t.Fatal(err)
	}
	keys, vals := scanAll(t, s, store.Runs, nil)
	if !slices.Equal(keys, []string{"r1", "r2", "r3"}) || !slices.Equal(vals, []string{"one", "two", "THREE"}) {
		t.Errorf("runs %q %q", keys, vals)
	}
	// Event keys are binary (big-endian seq after a 0 byte): byte order is
	// sequence order, and a run's prefix does not match "run-b".
	_, vals = scanAll(t, s, store.Events, append([]byte("run"), 0))
	if !slices.Equal(vals, []string{"e1", "e2", "e256"}) {
		t.Errorf("events of run %q", vals)
	}
	_, vals = scanAll(t, s, store.Events, nil)
	if !slices.Equal(vals, []string{"u1", "e1", "e2", "e256", "b1"}) {
		t.Errorf("all events %q", vals)
	}
	if v, err := s.Get(store.Runs, []byte("r2")); err != nil || string(v) != "two" {
		t.Errorf("Get r2 = %q, %v", v, err)
	}
	if v, err := s.Get(store.Lineage, []byte("x")); err != nil || v == nil || len(v) != 0 {
		t.Errorf("Get of an empty value = %#v, %v", v, err)
	}
	if v, err := s.Get(store.Runs, []byte("nope")); err != nil || v != nil {
		t.Errorf("Get of a missing key = %q, %v", v, err)
	}

	// Deletes, mixed with puts in one batch.
	if err := <-s.Apply([]store.Op{
		{Bucket: store.Runs, Key: []byte("r1")},
		{Bucket: store.Runs, Key: []byte("r0"), Value: []byte("zero")},
		{Bucket: store.Runs, Key: []byte("missing")},
	}); err != nil {
		t.Fatal(err)
	}
	keys, _ = scanAll(t, s, store.Runs, nil)
	if !slices.Equal(keys, []string{"r0", "r2", "r3"}) {
		t.Errorf("after delete %q", keys)
	}
	if v, _ := s.Get(store.Runs, []byte("r1")); v != nil {
		t.Errorf("deleted key still reads %q", v)
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
}

func TestStoreScanPrefix(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	var ops []store.Op
	for _, k := range []string{"a", "ab", "abc", "abd", "ac", "b", "\xff", "\xff\xff", "\xff\xffz", "a\xff", "a\xff\x01"} {
		ops = append(ops, store.Op{Bucket: store.Lineage, Key: []byte(k), Value: []byte("v" + k)})
	}
	if err := <-s.Apply(ops); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a", "ab", "abc", "abd", "ac", "a\xff", "a\xff\x01", "b", "\xff", "\xff\xff", "\xff\xffz"}},
		{"a", []string{"a", "ab", "abc", "abd", "ac", "a\xff", "a\xff\x01"}},
		{"ab", []string{"ab", "abc", "abd"}},
		{"abc", []string{"abc"}},
		{"a\xff", []string{"a\xff", "a\xff\x01"}},
		{"\xff\xff", []string{"\xff\xff", "\xff\xffz"}},
		{"\xff", []string{"\xff", "\xff\xff", "\xff\xffz"}},
		{"c", nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.prefix), func(t *testing.T) {
			keys, vals := scanAll(t, s, store.Lineage, []byte(tc.prefix))
			if !slices.Equal(keys, tc.want) {
				t.Errorf("keys %q, want %q", keys, tc.want)
			}
			for i, k := range keys {
				if vals[i] != "v"+k {
					t.Errorf("value of %q is %q", k, vals[i])
				}
			}
		})
	}
	// fn's error stops the scan and is returned.
	stop := errors.New("stop")
	n := 0
	err := s.Scan(store.Lineage, func(k, v []byte) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("scan stopped after %d with %v", n, err)
	}
}

func TestStorePagesAndGroupCommit(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	// Many concurrent Applies (group-committed), more records than a page.
	const writers, per = 8, 3*scanPage/8 + 5
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				k := fmt.Appendf(nil, "k%02d-%04d", w, i)
				if err := <-s.Apply([]store.Op{{Bucket: store.Blobs, Key: k, Value: k}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var prev []byte
	n := 0
	err := s.Scan(store.Blobs, func(k, v []byte) error {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Errorf("%q after %q", k, prev)
		}
		if !bytes.Equal(k, v) {
			t.Errorf("value of %q is %q", k, v)
		}
		prev = bytes.Clone(k)
		n++
		return nil
	})
	if err != nil || n != writers*per {
		t.Errorf("scanned %d records (%v), want %d", n, err, writers*per)
	}
}

func TestStoreUnknownBucketAndClose(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	if err := <-s.Apply([]store.Op{
		{Bucket: store.Runs, Key: []byte("k"), Value: []byte("v")},
		{Bucket: "nope", Key: []byte("k"), Value: []byte("v")},
	}); err == nil {
		t.Error("an unknown bucket was accepted")
	}
	if v, _ := s.Get(store.Runs, []byte("k")); v != nil {
		t.Error("a failed batch was partly applied")
	}
	if err := s.Scan("nope", func(k, v []byte) error { return nil }); err == nil {
		t.Error("scan of an unknown bucket succeeded")
	}
	done := s.Apply([]store.Op{{Bucket: store.Runs, Key: []byte("last"), Value: []byte("v")}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("queued write before Close: %v", err)
	}
	if err := <-s.Apply([]store.Op{{Bucket: store.Runs, Key: []byte("k"), Value: []byte("v")}}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Apply after Close: %v", err)
	}
	if err := s.Healthy(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Healthy after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// GetMany gives each key's record, or nil, in the keys' order, over more
// keys than one round trip reads.
func TestStoreGetMany(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	n := store.GetManyBatch*2 + 7
	var ops []store.Op
	var keys [][]byte
	for i := range n {
		key := []byte(fmt.Sprintf("r%04d", i))
		keys = append(keys, key)
		if i%3 != 0 { // every third key has no record
			ops = append(ops, store.Op{Bucket: store.Runs, Key: key, Value: []byte(fmt.Sprint(i))})
		}
	}
	if err := <-s.Apply(ops); err != nil {
		t.Fatal(err)
	}
	next := 0
	err := s.GetMany(store.Runs, keys, func(i int, v []byte) error {
		want := fmt.Sprint(i)
		if i%3 == 0 {
			want = ""
		}
		if i != next || string(v) != want || (i%3 == 0) != (v == nil) {
			t.Fatalf("call %d: key %d = %q, want %q", next, i, v, want)
		}
		next++
		return nil
	})
	if err != nil || next != n {
		t.Fatalf("%d of %d keys, %v", next, n, err)
	}
	stop := errors.New("stop")
	if err := s.GetMany(store.Runs, keys, func(i int, _ []byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
}

// BenchmarkApply is one durable write of a run snapshot (one MULTI/EXEC).
func BenchmarkApply(b *testing.B) {
	s := openStore(b)
	v := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		if err := <-s.Apply([]store.Op{{Bucket: store.Runs, Key: []byte("run-1"), Value: v}}); err != nil {
			b.Fatal(err)
		}
	}
}
