package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

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

var unlockScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`)

// Lock takes the cross-replica lock of a run, waiting (bounded) while
// another replica holds it.
func (s *Store) Lock(ctx context.Context, runID string) (func(), error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := s.prefix + "lock:run:" + runID
	deadline := time.Now().Add(lockWait)
	wait := time.Millisecond
	for {
		// SET NX GET: when a retried SET (after a lost reply) finds our own
		// token, the lock is ours.
		prev, err := s.rdb.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", Get: true, TTL: LockTTL}).Result()
		if errors.Is(err, redis.Nil) || (err == nil && prev == token) {
			break
		}
		if err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, ErrLockTimeout
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 20*time.Millisecond)
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = unlockScript.Run(uctx, s.rdb, []string{key}, token).Err()
	}, nil
}
