package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/haltline/haltline/accounting"
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
	unlock, _, _, _, err := s.lock(ctx, runID, "", time.Time{}, false, nil)
	return unlock, err
}

// LockRead takes the run's lock as Lock does and reads, in the same round
// trip, the run's stored snapshot (store.Runs; nil when there is none) and,
// when ledger is set, that ledger's state as Book.Snapshot reads it at now
// (nil when the ledger does not exist): the pipeline reads both first
// under the lock — the snapshot to catch up with other replicas, the run's
// own ledger to count its steps — and each was a round trip of its own.
// Redis runs a pipeline's commands in order, so the reads see every write
// made before the lock was taken. release, an op of store.LockRelease,
// lets go of the lock in the commit that carries it, after that commit's
// writes: a round trip fewer than unlock, which stays for every other way
// out.
func (s *Store) LockRead(ctx context.Context, runID, ledger string, now time.Time) (unlock func(), release store.Op, snapshot []byte, state *accounting.LedgerSnapshot, err error) {
	return s.lock(ctx, runID, ledger, now, true, nil)
}

// LockReadRiding is LockRead with a settlement riding in the lock's
// first round trip (Book.SettleRider, of a Book on this Store's client;
// another rider goes out by itself at its Result): a settlement needs no
// run lock, and Finish takes one next. Whether or not the lock is had,
// the rider's Result then tells what the settlement came to.
func (s *Store) LockReadRiding(ctx context.Context, runID, ledger string, now time.Time, rider accounting.Rider) (unlock func(), release store.Op, snapshot []byte, state *accounting.LedgerSnapshot, err error) {
	r, _ := rider.(*settleRider)
	if r != nil && r.b.rdb != s.rdb {
		r = nil
	}
	return s.lock(ctx, runID, ledger, now, true, r)
}

func (s *Store) lock(ctx context.Context, runID, ledger string, now time.Time, read bool, rider *settleRider) (func(), store.Op, []byte, *accounting.LedgerSnapshot, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := s.prefix + "lock:run:" + runID
	deadline := time.Now().Add(lockWait)
	wait := time.Millisecond
	var snapshot []byte
	var state *accounting.LedgerSnapshot
	for {
		// SET NX GET: when a retried SET (after a lost reply) finds our own
		// token, the lock is ours.
		var set *redis.StatusCmd
		var get *redis.StringCmd
		var led *redis.SliceCmd
		if read {
			// Each command's own error tells: a network error fails all,
			// and a lock found free answers Nil.
			_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				set = p.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", Get: true, TTL: LockTTL})
				get = p.HGet(ctx, s.valsKey(store.Runs), runID)
				if ledger != "" {
					led = p.HMGet(ctx, ledgerKey(s.prefix, ledger), ledgerFields...)
				}
				if rider != nil {
					rider.queue(ctx, p) // once: a retry leaves it out
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
				if snapshot, state, err = lockReads(runID, ledger, get, led, now); err != nil {
					// The lock is ours but a read failed: let it go.
					s.unlock(ctx, key, token)
					return nil, store.Op{}, nil, nil, err
				}
			}
			break
		}
		if serr != nil {
			return nil, store.Op{}, nil, nil, serr
		}
		if time.Now().After(deadline) {
			return nil, store.Op{}, nil, nil, ErrLockTimeout
		}
		select {
		case <-ctx.Done():
			return nil, store.Op{}, nil, nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 20*time.Millisecond)
	}
	release := store.Op{Bucket: store.LockRelease, Key: []byte(key), Value: []byte(token)}
	return func() { s.unlock(ctx, key, token) }, release, snapshot, state, nil
}

// lockReads is what LockRead's reads found.
func lockReads(runID, ledger string, get *redis.StringCmd, led *redis.SliceCmd, now time.Time) ([]byte, *accounting.LedgerSnapshot, error) {
	snapshot, err := get.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		snapshot = nil
	case err != nil:
		return nil, nil, fmt.Errorf("redis store: get %s %s: %w", store.Runs, runID, err)
	}
	if led == nil {
		return snapshot, nil, nil
	}
	ls, err := views([]string{ledger}, []*redis.SliceCmd{led}, now)
	if err != nil {
		return nil, nil, fmt.Errorf("redis store: ledger %s: %w", ledger, err)
	}
	if ls[0] == nil {
		return snapshot, nil, nil
	}
	l := ls[0]
	return snapshot, &accounting.LedgerSnapshot{Limit: vector(l.limit), Spent: vector(l.spent), Reserved: vector(l.reserved)}, nil
}

func (s *Store) unlock(ctx context.Context, key, token string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = unlockScript.Run(uctx, s.rdb, []string{key}, token).Err()
}
