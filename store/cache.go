package store

import (
	"bytes"
	"hash/maphash"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// CacheOptions configures Cached.
type CacheOptions struct {
	// MaxBytes bounds what the cache holds: keys and values, plus an
	// estimate of the cache's own cost per record. 0 or less: no cache.
	MaxBytes int64
	// Buckets are the buckets whose records are cached; reads of any
	// other go to the store.
	Buckets []Bucket
}

// ReadCacheBuckets are the buckets worth caching: records read back more
// than once and written seldom — run snapshots (of ended runs, which
// leave memory), lineage keys and the stored text of cut tool results.
var ReadCacheBuckets = []Bucket{Runs, Lineage, Blobs}

// CachedStore is the embedded store whose Get and GetMany serve the
// records of some buckets from memory (Cached). Its other methods are the
// Bolt's, those the Store interface lacks included (ApplyBehind,
// Recovered), which the pipeline and app look for.
type CachedStore struct {
	*Bolt
	cache   *ristretto.Cache[uint64, cachedRecord]
	buckets map[Bucket]bool
	maxCost int64 // of one record: a larger one is not cached
	seed    maphash.Seed
	// versions counts the commits that wrote a key, striped by the key's
	// hash (versionStripes): a record is served from the cache only while
	// its stripe's count is the one read before the record was read from
	// the store. Keys sharing a stripe only cost each other misses.
	versions     []atomic.Uint64
	hits, misses atomic.Uint64
}

// cachedRecord is a record as read from the store, with the version of
// its key's stripe read before it, and its key in the cache: the cache is
// keyed by a seeded hash of the key (handing ristretto the key's bytes
// would move the caller's key buffer to the heap), and a hit is checked
// against the key itself.
type cachedRecord struct {
	version uint64
	key     string
	value   []byte
}

// versionStripes is how many version counters a cache keeps. A commit
// bumps one per key it writes in a cached bucket: at a thousand run
// snapshots a second, a stripe is bumped about once a minute, which is
// how long a cached record shares its stripe's count with a running run.
const versionStripes = 1 << 16

// cacheRecordBytes is what a cached record costs besides its key and
// value: ristretto's item and maps, the record's slice header.
const cacheRecordBytes = 96

// Cached returns st with a read cache in front of the buckets of o, or
// st itself when o.MaxBytes is not positive or st is not the embedded
// store. The cache learns of every write from the store's commit, when
// the write becomes visible to reads (Bolt.commit): that holds only when
// this process is the store's one writer, so a store that replicas share
// (Redis) is never cached — another replica's write would go unseen.
//
// A read never returns what the store would not: a record is cached with
// the version of its key's stripe read before the record was read, and
// served only while that version holds. A commit writing the key bumps
// the version in the same critical section that makes the write visible,
// so a record read before it, and cached after it (ristretto applies a
// Set in the background), is never served. A Set ristretto drops, or an
// eviction, costs a read of the store; absent records are not cached.
func Cached(st Store, o CacheOptions) Store {
	b, ok := st.(*Bolt)
	if !ok || o.MaxBytes <= 0 || len(o.Buckets) == 0 {
		return st
	}
	c := &CachedStore{Bolt: b, seed: maphash.MakeSeed(), versions: make([]atomic.Uint64, versionStripes),
		buckets: map[Bucket]bool{}, maxCost: max(o.MaxBytes/8, 1)}
	for _, b := range o.Buckets {
		c.buckets[b] = true
	}
	cache, err := ristretto.NewCache(&ristretto.Config[uint64, cachedRecord]{
		// About ten keys counted per record held, records of about 1 KB.
		NumCounters:        max(o.MaxBytes/100, 1000),
		MaxCost:            o.MaxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true, // cacheRecordBytes counts it
	})
	if err != nil {
		// Only a configuration out of range fails, and this one is not.
		panic(err)
	}
	c.cache = cache
	b.ovMu.Lock()
	b.onCommit = c.committed
	b.ovMu.Unlock()
	return c
}

func (c *CachedStore) cached(b Bucket) bool { return c.buckets[b] }

// hash is where the record whose key in the cache is ck (appendCacheKey)
// goes in the cache, and its version stripe's place.
func (c *CachedStore) hash(ck []byte) uint64 { return maphash.Bytes(c.seed, ck) }

func (c *CachedStore) stripe(h uint64) *atomic.Uint64 { return &c.versions[h%versionStripes] }

// appendCacheKey appends the record's key in the cache.
func appendCacheKey(dst []byte, b Bucket, key []byte) []byte {
	return append(append(append(dst, b...), 0), key...)
}

// committed bumps the version of every key the batches write in a cached
// bucket. The store calls it under the lock that makes them visible.
func (c *CachedStore) committed(batches [][]Op) {
	var buf [128]byte
	for _, ops := range batches {
		for _, op := range ops {
			if c.cached(op.Bucket) {
				c.stripe(c.hash(appendCacheKey(buf[:0], op.Bucket, op.Key))).Add(1)
			}
		}
	}
}

// lookup returns the cached record whose key in the cache is ck
// (appendCacheKey), with hit set, or the version to cache the record
// under once read from the store.
func (c *CachedStore) lookup(ck []byte) (value []byte, hit bool, version uint64) {
	h := c.hash(ck)
	version = c.stripe(h).Load()
	if r, ok := c.cache.Get(h); ok && r.version == version && r.key == string(ck) {
		c.hits.Add(1)
		// The caller may keep or change what it is given.
		return bytes.Clone(r.value), true, version
	}
	c.misses.Add(1)
	return nil, false, version
}

// keep offers a record read from the store to the cache, which may keep
// it or not.
func (c *CachedStore) keep(ck []byte, version uint64, value []byte) {
	if value == nil {
		return
	}
	cost := int64(len(ck)+len(value)) + cacheRecordBytes
	if cost > c.maxCost {
		return // one record would push out a good part of the others
	}
	c.cache.Set(c.hash(ck), cachedRecord{version: version, key: string(ck), value: bytes.Clone(value)}, cost)
}

// Get implements Store.
func (c *CachedStore) Get(b Bucket, key []byte) ([]byte, error) {
	if !c.cached(b) {
		return c.Bolt.Get(b, key)
	}
	var buf [128]byte
	ck := appendCacheKey(buf[:0], b, key)
	v, hit, version := c.lookup(ck)
	if hit {
		return v, nil
	}
	v, err := c.Bolt.Get(b, key)
	if err == nil {
		c.keep(ck, version, v)
	}
	return v, err
}

// GetMany implements Store: the cached records, and the others read from
// the store a batch at a time. Those are not offered to the cache: a
// GetMany is a sweep (the runs a restart restores, the runs retention
// deletes) that reads each record once.
func (c *CachedStore) GetMany(b Bucket, keys [][]byte, fn func(i int, value []byte) error) error {
	if !c.cached(b) {
		return c.Bolt.GetMany(b, keys, fn)
	}
	n := min(len(keys), GetManyBatch)
	missed := make([][]byte, 0, n)
	at := make([]int, 0, n) // missed[j] is batch[at[j]]
	var ck []byte
	return getBatches(keys, func(batch, vals [][]byte) error {
		missed, at = missed[:0], at[:0]
		for i, key := range batch {
			ck = appendCacheKey(ck[:0], b, key)
			var hit bool
			if vals[i], hit, _ = c.lookup(ck); !hit {
				missed = append(missed, key)
				at = append(at, i)
			}
		}
		if len(missed) == 0 {
			return nil
		}
		return c.Bolt.GetMany(b, missed, func(j int, v []byte) error {
			vals[at[j]] = v
			return nil
		})
	}, fn)
}

// Hits and Misses count the reads of cached buckets served from the cache
// and from the store.
func (c *CachedStore) Hits() uint64   { return c.hits.Load() }
func (c *CachedStore) Misses() uint64 { return c.misses.Load() }

// Close implements Store: the cache's goroutines stop with the store.
func (c *CachedStore) Close() error {
	err := c.Bolt.Close()
	c.cache.Close()
	return err
}
