package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MaxBatch bounds the ops committed in one transaction.
const MaxBatch = 4096

// Bolt is the embedded store: one bbolt file, written by a single goroutine
// in group commits.
type Bolt struct {
	db    *bolt.DB
	queue chan pending
	done  chan struct{}

	mu      sync.Mutex
	closed  bool
	lastErr error
}

type pending struct {
	ops []Op
	res chan error
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
	s := &Bolt{db: db, queue: make(chan pending, 1024), done: make(chan struct{})}
	go s.writer()
	return s, nil
}

// Apply implements Store.
func (s *Bolt) Apply(ops []Op) <-chan error {
	res := make(chan error, 1)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		res <- ErrClosed
		return res
	}
	s.queue <- pending{ops: ops, res: res}
	return res
}

// writer commits everything queued since the last commit in one
// transaction: the group commit.
func (s *Bolt) writer() {
	defer close(s.done)
	batch := make([]pending, 0, 64)
	for p := range s.queue {
		batch = append(batch[:0], p)
		n := len(p.ops)
	drain:
		for n < MaxBatch {
			select {
			case q, ok := <-s.queue:
				if !ok {
					break drain
				}
				batch = append(batch, q)
				n += len(q.ops)
			default:
				break drain
			}
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, p := range batch {
				for _, op := range p.ops {
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
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		for _, p := range batch {
			p.res <- err
		}
	}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return s.lastErr
}

// Close implements Store.
func (s *Bolt) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.queue)
	<-s.done
	return errors.Join(s.db.Close())
}
