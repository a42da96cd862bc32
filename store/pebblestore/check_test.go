package pebblestore_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/pebblestore"
)

// killedWith is a copy of a store's directory after n commits of one
// 1 KB run each, taken while it is open (as a kill leaves it), and the
// path of its log in the copy.
func killedWith(t *testing.T, n int) (dir, log string) {
	t.Helper()
	live := t.TempDir()
	s, err := pebblestore.Open(live, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		op := store.Op{Bucket: store.Runs, Key: fmt.Appendf(nil, "r-%03d", i), Value: bytes.Repeat([]byte{'x'}, 1024)}
		if err := <-s.Apply([]store.Op{op}); err != nil {
			t.Fatal(err)
		}
	}
	dir = filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(live)); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) != 1 {
		t.Fatalf("logs %v", logs)
	}
	return dir, logs[0]
}

func runs(t *testing.T, dir string) int {
	t.Helper()
	r, err := pebblestore.Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r.Records[store.Runs]
}

// A log whose last record a kill tore is cut before it: the commit is lost
// as a whole, those before it are all there, and Check says the store
// opens.
func TestTornLogTailIsDropped(t *testing.T) {
	dir, log := killedWith(t, 100)
	if n := runs(t, dir); n != 100 {
		t.Fatalf("%d runs before the tear", n)
	}
	info, err := os.Stat(log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(log, info.Size()-500); err != nil {
		t.Fatal(err)
	}
	if n := runs(t, dir); n != 99 {
		t.Fatalf("%d runs after the tear, want 99", n)
	}
	s, err := pebblestore.Open(dir, pebblestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Get(store.Runs, []byte("r-099")); v != nil || !s.Recovered() {
		t.Fatalf("the torn commit: %q, recovered %v", v, s.Recovered())
	}
}

// Damage before the log's last record fails the open and Check alike:
// replaying past it would apply later commits without the ones it held.
func TestDamageInTheLogStopsTheOpen(t *testing.T) {
	dir, log := killedWith(t, 100)
	f, err := os.OpenFile(log, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 64), 40_000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := pebblestore.Check(dir); !pebble.IsCorruptionError(err) {
		t.Fatalf("check of a damaged log: %v", err)
	}
	if s, err := pebblestore.Open(dir, pebblestore.Options{}); !pebble.IsCorruptionError(err) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("open of a damaged log: %v", err)
	}
}
