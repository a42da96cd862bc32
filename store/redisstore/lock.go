package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/haltline/haltline/store"
	"github.com/redis/go-redis/v9"
)

// Run locks: several replicas serialise the transitions of one run (the
// pipeline's RunLock). A lock is a key set with NX and a TTL, so a replica
// that dies while holding it blocks the run for LockTTL at most; it is
// released only by its holder (compare-and-delete).
const (
	LockTTL  = 10 * time.Second
	lockWait = 5 * time.Second
)

// ErrLockTimeout is returned when a run's lock could not be had in time.
var ErrLockTimeout = errors.New("redisstore: run lock not acquired in time")

// unlockSrc deletes the lock only while it is still its holder's: one
// that expired and was taken by another replica stays.
const unlockSrc = `
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`

var unlockScript = redis.NewScript(unlockSrc)

// Lock takes the cross-replica lock of a run, waiting (bounded) while
// another replica holds it.
func (s *Store) Lock(ctx context.Context, runID string) (func(), error) {
	unlock, _, _, err := s.lock(ctx, runID, false, nil)
	return unlock, err
}

// LockRead takes the run's lock as Lock does and reads, in the same round
// trip, the run's stored snapshot (store.Runs; nil when there is none):
// the pipeline reads it first under the lock, to catch up with other
// replicas, and it was a round trip of its own. ride, when not nil, adds
// another user's commands on the same client to that round trip (the
// ledger book's: the run's ledger read, a settlement): it is called at
// every attempt, after the lock's own commands, and the last attempt is
// the one that took the lock; its commands' replies are the caller's to
// read, and an error of theirs is not the lock's. Redis runs a pipeline's
// commands in order, so the reads see every write made before the lock
// was taken. release, an op of store.LockRelease, lets go of the lock in
// the commit that carries it, after that commit's writes: a round trip
// fewer than unlock, which stays for every other way out.
func (s *Store) LockRead(ctx context.Context, runID string, ride func(redis.Pipeliner)) (unlock func(), release store.Op, snapshot []byte, err error) {
	return s.lock(ctx, runID, true, ride)
}

func (s *Store) lock(ctx context.Context, runID string, read bool, ride func(redis.Pipeliner)) (func(), store.Op, []byte, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := s.prefix + "lock:run:" + runID
	deadline := time.Now().Add(lockWait)
	wait := time.Millisecond
	var snapshot []byte
	for {
		// SET NX GET: when a retried SET (after a lost reply) finds our own
		// token, the lock is ours.
		var set *redis.StatusCmd
		var get *redis.StringCmd
		if read {
			// Each command's own error tells: a network error fails all,
			// and a lock found free answers Nil.
			_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				set = p.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", Get: true, TTL: LockTTL})
				get = p.HGet(ctx, s.valsKey(store.Runs), runID)
				if ride != nil {
					ride(p)
				}
				return nil
			})
		} else {
			set = s.rdb.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", Get: true, TTL: LockTTL})
		}
		prev, serr := set.Result()
		if errors.Is(serr, redis.Nil) || (serr == nil && prev == token) {
			if read {
				var err error
				if snapshot, err = get.Bytes(); errors.Is(err, redis.Nil) {
					snapshot = nil
				} else if err != nil {
					// The lock is ours but the read failed: let it go.
					s.unlock(ctx, key, token)
					return nil, store.Op{}, nil, fmt.Errorf("redis store: get %s %s: %w", store.Runs, runID, err)
				}
			}
			break
		}
		if serr != nil {
			return nil, store.Op{}, nil, serr
		}
		if time.Now().After(deadline) {
			return nil, store.Op{}, nil, ErrLockTimeout
		}
		select {
		case <-ctx.Done():
			return nil, store.Op{}, nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 20*time.Millisecond)
	}
	release := store.Op{Bucket: store.LockRelease, Key: []byte(key), Value: []byte(token)}
	return func() { s.unlock(ctx, key, token) }, release, snapshot, nil
}

func (s *Store) unlock(ctx context.Context, key, token string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = unlockScript.Run(uctx, s.rdb, []string{key}, token).Err()
}
