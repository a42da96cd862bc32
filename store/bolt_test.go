package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestBoltGroupCommitAndReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := []Op{
				{Bucket: Runs, Key: fmt.Appendf(nil, "r-%03d", i), Value: fmt.Appendf(nil, "run %d", i)},
				{Bucket: Events, Key: EventKey(fmt.Sprintf("r-%03d", i), 1), Value: []byte("ev")},
			}
			if err := <-s.Apply(ops); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := <-s.Apply([]Op{{Bucket: Runs, Key: []byte("r-000")}}); err != nil { // delete
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-s.Apply(nil); err != ErrClosed {
		t.Fatalf("apply after close: %v", err)
	}
	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	if err := s.Scan(Runs, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 199 {
		t.Fatalf("%d runs after reopen", n)
	}
	ev := 0
	_ = s.ScanPrefix(Events, append([]byte("r-007"), 0), func(k, v []byte) error { ev++; return nil })
	if ev != 1 {
		t.Fatalf("%d events for r-007", ev)
	}
}

// BenchmarkBoltApply is one commit, waited for, with one caller per P and
// with 32 (contended: with -cpu 1, the harness's placement, it shows
// whether commits made in place still beat grouping them in the writer).
func BenchmarkBoltApply(b *testing.B) {
	for _, bc := range []struct {
		name    string
		callers int
	}{{"one", 1}, {"contended", 32}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := OpenBolt(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			val := make([]byte, 1500)
			b.ReportAllocs()
			b.SetParallelism(bc.callers)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if err := <-s.Apply([]Op{{Bucket: Runs, Key: fmt.Appendf(nil, "r-%d", i%512), Value: val}}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// Opening a store commits nothing when every bucket is there (a commit
// fsyncs the file at every start), and creates the buckets a file from a
// version with fewer lacks.
func TestOpenCreatesOnlyMissingBuckets(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-st.Apply([]Op{{Bucket: Runs, Key: []byte("r-1"), Value: []byte("run")}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	txid := func() int {
		db, err := bolt.Open(filepath.Join(dir, "haltline.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var id int
		_ = db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	before := txid()
	st, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if after := txid(); after != before {
		t.Fatalf("opening a complete store committed: transaction %d → %d", before, after)
	}

	db, err := bolt.Open(filepath.Join(dir, "haltline.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte(Recordings)) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := <-st.Apply([]Op{{Bucket: Recordings, Key: []byte("r-1"), Value: []byte("rec")}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if v, err := st.Get(Recordings, []byte("r-1")); err != nil || string(v) != "rec" {
		t.Fatalf("the bucket a file lacked: %q, %v", v, err)
	}
	if v, err := st.Get(Runs, []byte("r-1")); err != nil || string(v) != "run" {
		t.Fatalf("a record of the older file: %q, %v", v, err)
	}
}
