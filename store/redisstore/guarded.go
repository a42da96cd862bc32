package redisstore

import (
	"context"
	"fmt"

	"github.com/haltline/haltline/store"
	"github.com/redis/go-redis/v9"
)

// guardedLua: KEYS[1] the run's lock, KEYS[2] the runs' values (hash),
// then the hash of each condition, then each op's key index and values
// (sorted set, hash). ARGV: the run's key, the SHA-1 (hex) of the
// snapshot the writer holds (empty: none may be stored), that of the snapshot it writes (empty when
// it writes none), the number of conditions, each condition's field and
// value, then per op its key, "1" to put or "0" to delete, and its value.
// The ops are applied only while nobody holds the run's lock, the stored
// snapshot is the one the writer holds (no other replica moved the run
// since) and each condition's field holds its value. Returns 1 when
// applied, or found applied already: go-redis sends a pipeline again
// after a lost reply, and the write it finds is its own. 0 when the
// guard failed (nothing written).
var guardedScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then
  local sum = redis.sha1hex(cur)
  if sum == ARGV[3] then return 1 end
  if sum ~= ARGV[2] then return 0 end
elseif ARGV[2] ~= '' then
  return 0
end
local nc = tonumber(ARGV[4])
for c = 1, nc do
  if redis.call('HGET', KEYS[2 + c], ARGV[3 + 2 * c]) ~= ARGV[4 + 2 * c] then return 0 end
end
local ka, aa = 2 + nc, 4 + 2 * nc
for i = 1, (#ARGV - aa) / 3 do
  local kk, vk, k = KEYS[ka + 2 * i - 1], KEYS[ka + 2 * i], ARGV[aa + 3 * i - 2]
  if ARGV[aa + 3 * i - 1] == '1' then
    redis.call('HSET', vk, k, ARGV[aa + 3 * i])
    redis.call('ZADD', kk, 0, k)
  else
    redis.call('HDEL', vk, k)
    redis.call('ZREM', kk, k)
  end
end
return 1
`)

// ApplyGuarded writes ops (a run's commit) without the run's lock, in one
// script applied whole or not at all: only while no replica holds the
// run's lock and the run's stored snapshot (store.Runs, key runID) is
// still the one whose SHA-1 (hex) is stamp, the one this writer last
// wrote or read; an empty stamp, that none is stored (a new run).
// Otherwise nothing is written and applied is false: the
// caller takes the lock and catches up with the run instead. A write
// that finds the run's snapshot it writes stored already was applied by
// an earlier send of the same round trip: applied is true. Each of conds
// (a hash's key, a field, a value) holds when the field of that hash has
// that value: another user's state that the write depends on (the ledger
// book's, whose commands ride ahead of the write: a reservation made). ride, when
// not nil, adds another user's commands on the same client ahead of the
// script in the same round trip (the ledger book's settlement), as
// LockRead's does; their replies are the caller's to read, and an error
// of theirs is not the write's. A server that lost the script runs
// nothing of it: applied is false, and the script is loaded for the next
// write.
func (s *Store) ApplyGuarded(ctx context.Context, runID, stamp string, ops []store.Op, conds [][3]string, ride func(redis.Pipeliner)) (applied bool, err error) {
	keys := make([]string, 0, 2+len(conds)+2*len(ops))
	keys = append(keys, s.prefix+"lock:run:"+runID, s.valsKey(store.Runs))
	args := make([]any, 0, 4+2*len(conds)+3*len(ops))
	args = append(args, runID, stamp, "", len(conds))
	for _, c := range conds {
		keys = append(keys, c[0])
		args = append(args, c[1], c[2])
	}
	for _, op := range ops {
		if op.Bucket == store.Runs && string(op.Key) == runID && op.Value != nil {
			args[2] = store.Stamp(op.Value)
		}
		if !known(op.Bucket) {
			return false, fmt.Errorf("store: no bucket %q", op.Bucket)
		}
		keys = append(keys, s.keysKey(op.Bucket), s.valsKey(op.Bucket))
		if op.Value == nil {
			args = append(args, string(op.Key), "0", "")
		} else {
			args = append(args, string(op.Key), "1", op.Value)
		}
	}
	var res *redis.Cmd
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if ride != nil {
			ride(p)
		}
		res = guardedScript.EvalSha(ctx, p, keys, args...)
		return nil
	})
	n, err := res.Int64()
	if err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			_ = guardedScript.Load(ctx, s.rdb).Err()
			return false, nil
		}
		return false, fmt.Errorf("redis store: guarded commit: %w", err)
	}
	return n == 1, nil
}
