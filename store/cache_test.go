package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
)

// The pipeline commits behind a call through ApplyBehind, and app reports
// a recovered store through Recovered: the cache keeps both.
var _ interface {
	ApplyBehind([]Op) <-chan error
	Recovered() bool
} = (*CachedStore)(nil)

// openCached opens an embedded store in a new directory with a read cache
// of maxBytes in front of Runs, Lineage and Blobs.
func openCached(t *testing.T, maxBytes int64) *CachedStore {
	t.Helper()
	b, err := OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, ok := Cached(b, CacheOptions{MaxBytes: maxBytes, Buckets: ReadCacheBuckets}).(*CachedStore)
	if !ok {
		t.Fatal("the embedded store was not cached")
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustGet(t *testing.T, s Store, b Bucket, key string) string {
	t.Helper()
	v, err := s.Get(b, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return "<none>"
	}
	return string(v)
}

// settled reads key once from the store into the cache and waits until
// ristretto has kept it.
func settled(t *testing.T, c *CachedStore, b Bucket, key, want string) {
	t.Helper()
	if got := mustGet(t, c, b, key); got != want {
		t.Fatalf("%s %s: %q, want %q", b, key, got, want)
	}
	c.cache.Wait()
	hits := c.Hits()
	if got := mustGet(t, c, b, key); got != want || c.Hits() != hits+1 {
		t.Fatalf("%s %s again: %q (want %q), hits %d → %d", b, key, got, want, hits, c.Hits())
	}
}

// TestCachedReadsSeeWrites: a cached record that is overwritten or
// deleted, by Apply or Later, reads as the store holds it.
func TestCachedReadsSeeWrites(t *testing.T) {
	t.Parallel()
	c := openCached(t, 1<<20)
	mustApply(t, c.Bolt, put(Runs, "r1", "v1"), put(Lineage, "k1", "r1"), put(Blobs, "h1", "text"))

	settled(t, c, Runs, "r1", "v1")
	mustApply(t, c.Bolt, put(Runs, "r1", "v2"))
	if got := mustGet(t, c, Runs, "r1"); got != "v2" {
		t.Fatalf("after an overwrite: %q", got)
	}

	settled(t, c, Lineage, "k1", "r1")
	mustApply(t, c.Bolt, del(Lineage, "k1"))
	if got := mustGet(t, c, Lineage, "k1"); got != "<none>" {
		t.Fatalf("after a delete: %q", got)
	}

	settled(t, c, Blobs, "h1", "text")
	c.Later([]Op{put(Blobs, "h1", "later")})
	if err := <-c.Apply(nil); err != nil { // commits the Later ops
		t.Fatal(err)
	}
	if got := mustGet(t, c, Blobs, "h1"); got != "later" {
		t.Fatalf("after a Later write: %q", got)
	}

	// What a caller does to a cached value never reaches the next one.
	settled(t, c, Runs, "r1", "v2")
	v, _ := c.Get(Runs, []byte("r1"))
	v[0] = 'x'
	if got := mustGet(t, c, Runs, "r1"); got != "v2" {
		t.Fatalf("a caller's change reached the cache: %q", got)
	}
}

// TestCachedSetAfterWrite: a record read before a write and offered to
// the cache after it (ristretto's Set is applied in the background, so a
// reader's Set can land after a writer's commit) is never served.
func TestCachedSetAfterWrite(t *testing.T) {
	t.Parallel()
	c := openCached(t, 1<<20)
	mustApply(t, c.Bolt, put(Runs, "r1", "old"))
	ck := appendCacheKey(nil, Runs, []byte("r1"))
	_, hit, version := c.lookup(ck)
	if hit {
		t.Fatal("a hit before any read")
	}
	old, err := c.Bolt.Get(Runs, []byte("r1"))
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, c.Bolt, put(Runs, "r1", "new"))
	c.keep(ck, version, old)
	c.cache.Wait()
	if got := mustGet(t, c, Runs, "r1"); got != "new" {
		t.Fatalf("a record read before the write was served: %q", got)
	}
}

// TestCachedDroppedSets: a cache that keeps nothing (ristretto drops
// every Set: each record costs more than the cache holds) reads every
// record from the store, right.
func TestCachedDroppedSets(t *testing.T) {
	t.Parallel()
	c := openCached(t, 64)
	c.maxCost = 1 << 30 // every record offered to ristretto
	for i := range 3 {
		v := fmt.Sprint("v", i)
		mustApply(t, c.Bolt, put(Blobs, "h1", v))
		for range 2 {
			if got := mustGet(t, c, Blobs, "h1"); got != v {
				t.Fatalf("%q, want %q", got, v)
			}
			c.cache.Wait()
		}
	}
	if c.Hits() != 0 {
		t.Fatalf("%d hits", c.Hits())
	}
}

// TestCachedGetMany: records come in the order of the keys, cached or not,
// and absent ones as nil; a record cached and then overwritten comes as
// the store holds it.
func TestCachedGetMany(t *testing.T) {
	t.Parallel()
	c := openCached(t, 1<<20)
	var keys [][]byte
	want := map[int]string{}
	for i := range GetManyBatch + 10 {
		keys = append(keys, fmt.Appendf(nil, "r%04d", i))
		if i%3 != 0 {
			want[i] = fmt.Sprint("v", i)
			mustApply(t, c.Bolt, put(Runs, string(keys[i]), want[i]))
		}
	}
	for i := 0; i < len(keys); i += 5 { // some of them cached
		mustGet(t, c, Runs, string(keys[i]))
	}
	c.cache.Wait()
	hits := c.Hits()
	mustApply(t, c.Bolt, put(Runs, string(keys[10]), "changed"))
	want[10] = "changed"
	for range 2 {
		next := 0
		err := c.GetMany(Runs, keys, func(i int, v []byte) error {
			if i != next {
				t.Fatalf("record %d, want %d", i, next)
			}
			next++
			if w, ok := want[i]; (v == nil) == ok || (ok && string(v) != w) {
				t.Fatalf("record %d: %q, want %q", i, v, w)
			}
			return nil
		})
		if err != nil || next != len(keys) {
			t.Fatalf("%d records, %v", next, err)
		}
		c.cache.Wait()
	}
	if c.Hits() == hits {
		t.Fatal("no record came from the cache")
	}
}

// TestCachedOnlyItsBuckets: other buckets, and stores other than the
// embedded one, are not cached.
func TestCachedOnlyItsBuckets(t *testing.T) {
	t.Parallel()
	c := openCached(t, 1<<20)
	mustApply(t, c.Bolt, put(Ledgers, "l1", "1"))
	for range 2 {
		mustGet(t, c, Ledgers, "l1")
		c.cache.Wait()
	}
	if c.Hits() != 0 || c.Misses() != 0 {
		t.Fatalf("a ledger went through the cache: %d hits, %d misses", c.Hits(), c.Misses())
	}
	var other struct{ Store }
	if Cached(other, CacheOptions{MaxBytes: 1 << 20, Buckets: ReadCacheBuckets}) != other {
		t.Fatal("a store other than the embedded one was cached")
	}
	if _, ok := Cached(c.Bolt, CacheOptions{Buckets: ReadCacheBuckets}).(*Bolt); !ok {
		t.Fatal("a cache of 0 bytes was made")
	}
}

// TestCachedConcurrentWrites overwrites records while readers read them
// (run with -race): a reader never sees a record go back to an older
// value, and the writer reads its own write once it is committed.
func TestCachedConcurrentWrites(t *testing.T) {
	t.Parallel()
	c := openCached(t, 1<<20)
	const keys, writes = 4, 300
	value := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	for k := range keys {
		mustApply(t, c.Bolt, Op{Bucket: Runs, Key: fmt.Appendf(nil, "r%d", k), Value: value(0)})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			var last [keys]uint64
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keys
				v, err := c.Get(Runs, fmt.Appendf(nil, "r%d", k))
				if err != nil || len(v) != 8 {
					t.Errorf("r%d: %x %v", k, v, err)
					return
				}
				if n := binary.BigEndian.Uint64(v); n < last[k] {
					t.Errorf("r%d went back from %d to %d", k, last[k], n)
					return
				} else {
					last[k] = n
				}
			}
		})
	}
	for n := uint64(1); n <= writes; n++ {
		key := fmt.Appendf(nil, "r%d", n%keys)
		if err := <-c.Apply([]Op{{Bucket: Runs, Key: key, Value: value(n)}}); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(Runs, key); err != nil || !bytes.Equal(v, value(n)) {
			t.Fatalf("%s after writing %d: %x %v", key, n, v, err)
		}
	}
	close(stop)
	wg.Wait()
}

// TestCachedKeyChecked: a cached record is served only for its own key,
// even where another key's hash is the same.
func TestCachedKeyChecked(t *testing.T) {
	t.Parallel()
	c := openCached(t, 1<<20)
	mustApply(t, c.Bolt, put(Blobs, "a", "A"), put(Blobs, "b", "B"))
	ckA, ckB := appendCacheKey(nil, Blobs, []byte("a")), appendCacheKey(nil, Blobs, []byte("b"))
	// A's record where B's hash leads, at the version B's lookup reads.
	c.cache.Set(c.hash(ckB), cachedRecord{version: c.stripe(c.hash(ckB)).Load(), key: string(ckA), value: []byte("A")}, 100)
	c.cache.Wait()
	if got := mustGet(t, c, Blobs, "b"); got != "B" {
		t.Fatalf("b read %q", got)
	}
}

// BenchmarkCachedGet reads one record (a lineage key's size, a stored
// tool output's): from the cache, and from the store (its overlay, then
// bbolt once checkpointed).
func BenchmarkCachedGet(b *testing.B) {
	for _, size := range []int{32, 4096} {
		b.Run(fmt.Sprint(size, "B"), func(b *testing.B) {
			st, err := OpenBolt(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			c := Cached(st, CacheOptions{MaxBytes: 1 << 20, Buckets: ReadCacheBuckets}).(*CachedStore)
			defer c.Close()
			key := []byte("blob-handle-0001")
			if err := <-c.Apply([]Op{{Bucket: Blobs, Key: key, Value: bytes.Repeat([]byte("x"), size)}}); err != nil {
				b.Fatal(err)
			}
			get := func(b *testing.B, s Store) {
				b.ReportAllocs()
				for b.Loop() {
					if v, err := s.Get(Blobs, key); err != nil || len(v) != size {
						b.Fatal(len(v), err)
					}
				}
			}
			b.Run("overlay", func(b *testing.B) { get(b, c.Bolt) })
			if err := c.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			b.Run("bbolt", func(b *testing.B) { get(b, c.Bolt) })
			if _, err := c.Get(Blobs, key); err != nil {
				b.Fatal(err)
			}
			c.cache.Wait()
			b.Run("cached", func(b *testing.B) { get(b, c) })
		})
	}
}
