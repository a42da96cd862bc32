package pebblestore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/haltline/haltline/store"
)

// Options tune the store; zero values take the defaults.
type Options struct {
	// MemTableBytes is the size of one memtable (default 16 MiB): writes
	// stay in memory until one fills and is flushed to a table. Up to two
	// are held while the older one is being flushed.
	MemTableBytes uint64
	// CacheBytes is the block cache of the tables (default 8 MiB); the
	// kernel's page cache of the files comes on top of it.
	CacheBytes int64
	// Logger takes Pebble's messages (default slog.Default()).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 16 << 20
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 8 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Store is the embedded store on Pebble.
type Store struct {
	db *pebble.DB
	*store.GroupCommitter

	key []byte // the commit's key buffer: commits are serial

	recovered bool
}

// Wrote reports whether dir holds a Pebble database: Pebble keeps its
// manifest there.
func Wrote(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	return len(m) > 0
}

// openMarker is written when the store opens and deleted when it closes:
// found at the next open, the last process stopped without closing it.
var openMarker = []byte{0, 'o', 'p', 'e', 'n'}

// prefixes maps a bucket to its key prefix.
var prefixes = func() map[store.Bucket]byte {
	m := make(map[store.Bucket]byte, len(store.AllBuckets))
	for i, b := range store.AllBuckets {
		m[b] = byte(i + 1)
	}
	return m
}()

// Open opens (or creates) the Pebble database in dir. Pebble replays its
// log: a torn tail of the newest log file is dropped, other damage fails
// the open (pebble.IsCorruptionError(err)).
func Open(dir string, opts Options) (*Store, error) {
	opts.defaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref() // the database holds its own reference
	po := &pebble.Options{
		Cache:              cache,
		MemTableSize:       opts.MemTableBytes,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             slogger{opts.Logger},
	}
	created := !Wrote(dir)
	db, err := pebble.Open(dir, po)
	if err == nil && created {
		// A new database's first log is begun before its format allows
		// the log's records that tell damage from a torn tail: with it,
		// damage anywhere in the log would be taken for a torn tail and
		// every commit after it dropped without a word. Its second is not.
		if err = db.Close(); err == nil {
			db, err = pebble.Open(dir, po)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s := &Store{db: db}
	v, closer, err := db.Get(openMarker)
	switch {
	case err == nil:
		s.recovered = len(v) > 0
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := db.Set(openMarker, []byte{1}, pebble.Sync); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	s.GroupCommitter = store.NewGroupCommitter(s.commit, false)
	return s, nil
}

// Recovered reports whether the previous process stopped without closing
// the store (a crash, a kill): what it committed is here, what it held in
// memory only is gone.
func (s *Store) Recovered() bool { return s.recovered }

// commit applies the batches as one Pebble batch and waits for the fsync
// of Pebble's log (see doc.go for why every commit waits for one).
func (s *Store) commit(batches [][]store.Op) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, ops := range batches {
		for _, op := range ops {
			p, ok := prefixes[op.Bucket]
			if !ok {
				return fmt.Errorf("store: no bucket %q", op.Bucket)
			}
			s.key = append(append(s.key[:0], p), op.Key...)
			var err error
			if op.Value == nil {
				err = b.Delete(s.key, nil)
			} else {
				err = b.Set(s.key, op.Value, nil)
			}
			if err != nil {
				return err
			}
		}
	}
	return s.db.Apply(b, pebble.Sync)
}

// keyOf is the Pebble key of key in bucket b.
func keyOf(b store.Bucket, key []byte) ([]byte, error) {
	p, ok := prefixes[b]
	if !ok {
		return nil, fmt.Errorf("store: no bucket %q", b)
	}
	return append([]byte{p}, key...), nil
}

// Get implements store.Store.
func (s *Store) Get(b store.Bucket, key []byte) ([]byte, error) {
	k, err := keyOf(b, key)
	if err != nil {
		return nil, err
	}
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// GetMany implements store.Store: each batch of keys is read by one
// iterator, and fn is called once it is closed.
func (s *Store) GetMany(b store.Bucket, keys [][]byte, fn func(i int, value []byte) error) error {
	p, ok := prefixes[b]
	if !ok {
		return fmt.Errorf("store: no bucket %q", b)
	}
	vals := make([][]byte, 0, min(len(keys), store.GetManyBatch))
	var k []byte
	for start := 0; start < len(keys); start += store.GetManyBatch {
		batch := keys[start:min(start+store.GetManyBatch, len(keys))]
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{p}, UpperBound: []byte{p + 1}})
		if err != nil {
			return err
		}
		vals = vals[:0]
		for _, key := range batch {
			k = append(append(k[:0], p), key...)
			var v []byte
			if it.SeekGE(k) && bytes.Equal(it.Key(), k) {
				if v, err = it.ValueAndErr(); err != nil {
					it.Close()
					return err
				}
				v = bytes.Clone(v)
			}
			vals = append(vals, v)
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return err
		}
		for i, v := range vals {
			if err := fn(start+i, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Scan implements store.Store.
func (s *Store) Scan(b store.Bucket, fn func(key, value []byte) error) error {
	return s.ScanPrefix(b, nil, fn)
}

// ScanPrefix implements store.Store. fn sees Pebble's bytes, valid until
// it returns.
func (s *Store) ScanPrefix(b store.Bucket, prefix []byte, fn func(key, value []byte) error) error {
	lower, err := keyOf(b, prefix)
	if err != nil {
		return err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: successor(lower)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key()[1:], v)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// successor is the least key greater than every key starting with p; p
// starts with a bucket's prefix, which is never 0xff.
func successor(p []byte) []byte {
	end := bytes.Clone(p)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	end[len(end)-1]++
	return end
}

// Flush writes the memtable to a table, as Pebble does once it fills:
// for benchmarks and tools that want the store as it is after that.
func (s *Store) Flush() error { return s.db.Flush() }

// Healthy implements store.Store.
func (s *Store) Healthy() error {
	if s.Closed() {
		return store.ErrClosed
	}
	return s.LastError()
}

// Close implements store.Store: what is queued is committed, and the
// store is marked closed. Pebble replays the log of its memtables at the
// next open rather than flushing them now.
func (s *Store) Close() error {
	if !s.GroupCommitter.Close() {
		return nil
	}
	err := s.db.Delete(openMarker, pebble.Sync)
	return errors.Join(err, s.db.Close())
}

// slogger hands Pebble's messages to a slog.Logger.
type slogger struct{ l *slog.Logger }

func (g slogger) Infof(format string, args ...any) {
	g.l.Debug("store: " + fmt.Sprintf(format, args...))
}

func (g slogger) Errorf(format string, args ...any) {
	g.l.Error("store: " + fmt.Sprintf(format, args...))
}

// Fatalf is an invariant of Pebble's broken: it must not return.
func (g slogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	g.l.Error("store: " + msg)
	panic("store: " + msg)
}
