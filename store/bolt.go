package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxBatch bounds the ops committed in one transaction.
const MaxBatch = 4096

// Bolt is the embedded store: one bbolt file, written by a single goroutine
// in group commits.
type Bolt struct {
	db *bolt.DB
	*GroupCommitter
}

// OpenBolt opens (or creates) dir/haltline.db.
func OpenBolt(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "haltline.db"), 0o600, &bolt.Options{
		Timeout: 2 * time.Second,
		// The freelist is rebuilt on open instead of written at every
		// commit, and kept as a hashmap: commits are on the call path.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range AllBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &Bolt{db: db}
	s.GroupCommitter = NewGroupCommitter(s.commit)
	return s, nil
}

// commit applies the batches in one bbolt transaction: one fsync.
func (s *Bolt) commit(batches [][]Op) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, ops := range batches {
			for _, op := range ops {
				b := tx.Bucket([]byte(op.Bucket))
				if b == nil {
					return fmt.Errorf("store: no bucket %q", op.Bucket)
				}
				var err error
				if op.Value == nil {
					err = b.Delete(op.Key)
				} else {
					err = b.Put(op.Key, op.Value)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Get implements Store.
func (s *Bolt) Get(b Bucket, key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(b))
		if bk == nil {
			return fmt.Errorf("store: no bucket %q", b)
		}
		if v := bk.Get(key); v != nil {
			out = bytes.Clone(v)
		}
		return nil
	})
	return out, err
}

// Scan implements Store.
func (s *Bolt) Scan(b Bucket, fn func(key, value []byte) error) error {
	return s.ScanPrefix(b, nil, fn)
}

// ScanPrefix implements Store.
func (s *Bolt) ScanPrefix(b Bucket, prefix []byte, fn func(key, value []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(b))
		if bk == nil {
			return fmt.Errorf("store: no bucket %q", b)
		}
		c := bk.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if err := fn(k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// Healthy implements Store.
func (s *Bolt) Healthy() error {
	if s.Closed() {
		return ErrClosed
	}
	return s.LastError()
}

// Close implements Store.
func (s *Bolt) Close() error {
	if !s.GroupCommitter.Close() {
		return nil
	}
	return s.db.Close()
}
