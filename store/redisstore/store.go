package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/haltline/haltline/store"
	"github.com/redis/go-redis/v9"
)

// scanPage is how many records one Scan round trip reads.
const scanPage = 256

// commitTimeout bounds one group commit, on top of the client's own socket
// timeouts, so that a stalled server fails the batch instead of the queue.
const commitTimeout = 5 * time.Second

// Store is a store.Store on Redis. Each bucket is a hash (key → value) and a
// sorted set of its keys, all with score 0, so that ZRANGEBYLEX returns them
// in byte order as bbolt does. Writes are group-committed like Bolt's: one
// goroutine sends everything queued since its last commit as one
// MULTI/EXEC.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	owned  bool // Open made rdb: Close closes it
	*store.GroupCommitter
}

var _ store.Store = (*Store)(nil)

// NewStore returns a Store on rdb with every key under prefix (DefaultPrefix
// when empty). The caller keeps ownership of rdb; Close stops the writer.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	s := &Store{rdb: rdb, prefix: prefix}
	s.GroupCommitter = store.NewGroupCommitter(s.commit, true)
	return s
}

// Client is the Store's Redis client, for another user of the same server
// (the ledger book, whose work may ride in a lock's round trip: LockRead).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

func (s *Store) keysKey(b store.Bucket) string { return s.prefix + "store:" + string(b) + ":keys" }
func (s *Store) valsKey(b store.Bucket) string { return s.prefix + "store:" + string(b) + ":vals" }

// known mirrors Bolt, which has exactly the buckets of store.AllBuckets.
func known(b store.Bucket) bool { return slices.Contains(store.AllBuckets, b) }

// commit applies the batches as one MULTI/EXEC. A store.LockRelease op
// lets go of a run's lock (see LockRead) in its place among the writes.
func (s *Store) commit(batches [][]store.Op) error {
	for _, ops := range batches {
		for _, op := range ops {
			if !known(op.Bucket) && op.Bucket != store.LockRelease {
				return fmt.Errorf("store: no bucket %q", op.Bucket)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	// MULTI/EXEC: the batch is applied whole or not at all, in order. A
	// retried EXEC (go-redis retries once on a network error) replays the
	// same puts and deletes, which is harmless: they are idempotent and no
	// other commit runs meanwhile (the committer serialises them).
	_, err := s.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		for _, ops := range batches {
			for _, op := range ops {
				if op.Bucket == store.LockRelease {
					// EVAL, not EVALSHA: in a transaction a script missing
					// from the server's cache cannot be sent again.
					tx.Eval(ctx, unlockSrc, []string{string(op.Key)}, string(op.Value))
					continue
				}
				kk, vk := s.keysKey(op.Bucket), s.valsKey(op.Bucket)
				if op.Value == nil {
					tx.HDel(ctx, vk, string(op.Key))
					tx.ZRem(ctx, kk, string(op.Key))
				} else {
					tx.HSet(ctx, vk, string(op.Key), op.Value)
					tx.ZAdd(ctx, kk, redis.Z{Member: string(op.Key)})
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis store: commit: %w", err)
	}
	return nil
}

// Get implements store.Store: the value, or nil when there is none.
func (s *Store) Get(b store.Bucket, key []byte) ([]byte, error) {
	if !known(b) {
		return nil, fmt.Errorf("store: no bucket %q", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	v, err := s.rdb.HGet(ctx, s.valsKey(b), string(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis store: get %s: %w", b, err)
	}
	return v, nil
}

// GetMany implements store.Store: one HMGET a batch of
// store.GetManyBatch keys.
func (s *Store) GetMany(b store.Bucket, keys [][]byte, fn func(i int, value []byte) error) error {
	if !known(b) {
		return fmt.Errorf("store: no bucket %q", b)
	}
	fields := make([]string, 0, min(len(keys), store.GetManyBatch))
	for start := 0; start < len(keys); start += store.GetManyBatch {
		batch := keys[start:min(start+store.GetManyBatch, len(keys))]
		fields = fields[:0]
		for _, key := range batch {
			fields = append(fields, string(key))
		}
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		vals, err := s.rdb.HMGet(ctx, s.valsKey(b), fields...).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("redis store: get %s: %w", b, err)
		}
		if len(vals) != len(batch) {
			return fmt.Errorf("redis store: get %s: %d values for %d keys", b, len(vals), len(batch))
		}
		for i, v := range vals {
			var value []byte
			if str, ok := v.(string); ok {
				value = []byte(str)
			}
			if err := fn(start+i, value); err != nil {
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

// ScanPrefix implements store.Store. Each page of scanPage records is read
// atomically; a scan is not a snapshot across pages (writes between pages
// are seen or not), which suits its use: reading state back at start.
func (s *Store) ScanPrefix(b store.Bucket, prefix []byte, fn func(key, value []byte) error) error {
	if !known(b) {
		return fmt.Errorf("store: no bucket %q", b)
	}
	lo, hi := "-", "+"
	if len(prefix) > 0 {
		lo = "[" + string(prefix)
		if succ := successor(prefix); succ != nil {
			hi = "(" + string(succ)
		}
	}
	keys := []string{s.keysKey(b), s.valsKey(b)}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		res, err := scanScript.Run(ctx, s.rdb, keys, lo, hi, scanPage).Slice()
		cancel()
		if err != nil {
			return fmt.Errorf("redis store: scan %s: %w", b, err)
		}
		if len(res) < 2 {
			return fmt.Errorf("redis store: scan %s: unexpected reply %v", b, res)
		}
		n, _ := res[0].(int64)
		last, _ := res[1].(string)
		for i := 2; i+1 < len(res); i += 2 {
			k, _ := res[i].(string)
			v, _ := res[i+1].(string)
			if err := fn([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		if n < scanPage {
			return nil
		}
		lo = "(" + last
	}
}

// successor is the smallest key greater than every key with prefix p, or
// nil when there is none (p is all 0xff).
func successor(p []byte) []byte {
	s := bytes.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] < 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}

// Healthy implements store.Store: the server must answer a PING, and the
// last commit must have succeeded (a read-only replica answers PING but
// refuses writes).
func (s *Store) Healthy() error {
	if s.Closed() {
		return store.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	// Reachable again: a commit that failed during the outage is not a
	// reason to stay unready (the next write of each run carries its whole
	// state).
	s.ClearError()
	return nil
}

// Close implements store.Store: it commits what is queued, then closes the
// client if Open made it.
func (s *Store) Close() error {
	if !s.GroupCommitter.Close() {
		return nil
	}
	if s.owned {
		return s.rdb.Close()
	}
	return nil
}

// scanLua: KEYS[1] a bucket's key index (sorted set), KEYS[2] its values
// (hash). ARGV: min and max in ZRANGEBYLEX syntax, page size. Returns the
// number of keys examined, the last of them, then key, value, key, value…
// for one page, read atomically.
var scanScript = redis.NewScript(`
local ks = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
if #ks == 0 then return {0, ''} end
local vs = redis.call('HMGET', KEYS[2], unpack(ks))
local out = {#ks, ks[#ks]}
for i, k in ipairs(ks) do
  if vs[i] then
    out[#out + 1] = k
    out[#out + 1] = vs[i]
  end
end
return out
`)
