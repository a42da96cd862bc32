package redisbook

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/redis/go-redis/v9"
)

// Locker is a run lock on the Book's Redis client whose round trip can
// carry other commands (redisstore.Store: LockRead's ride); Op is the
// store's op that lets go of the lock in a commit.
type Locker[Op any] interface {
	Lock(ctx context.Context, runID string) (unlock func(), err error)
	LockRead(ctx context.Context, runID string, ride func(redis.Pipeliner)) (unlock func(), release Op, snapshot []byte, err error)
}

// RunLock is the pipeline's run lock on Redis: Locker's lock, with the
// Book's reads and settlements in its round trip. Locker must use the
// Book's client; a settlement of a Book on another client goes out by
// itself, at its Result.
type RunLock[Op any] struct {
	Locker Locker[Op]
	Book   *Book
}

// Lock takes the run's lock.
func (l RunLock[Op]) Lock(ctx context.Context, runID string) (func(), error) {
	return l.Locker.Lock(ctx, runID)
}

// LockRead takes the run's lock and reads, in the same round trip, the
// run's stored snapshot and, when ledger is set, that ledger's state as
// Snapshot reads it at now (nil when the ledger does not exist): the
// pipeline reads both first under the lock — the snapshot to catch up
// with other replicas, the run's own ledger to count its steps — and each
// was a round trip of its own.
func (l RunLock[Op]) LockRead(ctx context.Context, runID, ledger string, now time.Time) (unlock func(), release Op, snapshot []byte, state *accounting.LedgerSnapshot, err error) {
	return l.LockReadRiding(ctx, runID, ledger, now, nil)
}

// LockReadRiding is LockRead with a settlement riding in the lock's
// first round trip (Book.SettleRider; one of a Book on another client
// goes out by itself at its Result): a settlement needs no run lock, and
// Finish takes one next. A release (Book.ReleaseRider) rides so too,
// ahead of the ledger's read. Whether or not the lock is had, the rider's
// Result then tells what the settlement came to.
func (l RunLock[Op]) LockReadRiding(ctx context.Context, runID, ledger string, now time.Time, rider accounting.Rider) (unlock func(), release Op, snapshot []byte, state *accounting.LedgerSnapshot, err error) {
	settle, _ := rider.(*settleRider)
	if settle != nil && settle.b.rdb != l.Book.rdb {
		settle = nil
	}
	free, _ := rider.(*releaseRider)
	if free != nil && free.b.rdb != l.Book.rdb {
		free = nil
	}
	var read *redis.SliceCmd
	ride := func(p redis.Pipeliner) {
		if free != nil {
			free.queue(ctx, p) // ahead of the read, which then sees it
		}
		if ledger != "" {
			read = p.HMGet(ctx, l.Book.ledgerKey(ledger), ledgerFields...)
		}
		if settle != nil {
			settle.queue(ctx, p) // once: a retry leaves it out
		}
	}
	if unlock, release, snapshot, err = l.Locker.LockRead(ctx, runID, ride); err != nil || read == nil {
		return unlock, release, snapshot, nil, err
	}
	ls, err := views([]string{ledger}, []*redis.SliceCmd{read}, now)
	if err != nil {
		// The lock is ours but the read failed: let it go.
		unlock()
		var none Op
		return nil, none, nil, nil, fmt.Errorf("redis book: ledger %s: %w", ledger, err)
	}
	if l := ls[0]; l != nil {
		state = &accounting.LedgerSnapshot{Limit: vector(l.limit), Spent: vector(l.spent), Reserved: vector(l.reserved)}
	}
	return unlock, release, snapshot, state, nil
}

// GuardedWriter is a Locker that can also write a run without its lock,
// guarded (redisstore.Store.ApplyGuarded): applied only while the lock is
// free and the run's stored snapshot is the one stamp names.
type GuardedWriter[Op any] interface {
	ApplyGuarded(ctx context.Context, runID, stamp string, ops []Op, conds [][3]string, ride func(redis.Pipeliner)) (applied bool, err error)
}

// WriteGuarded writes ops as GuardedWriter does, with a settlement
// (Book.SettleRider, nil for none) ahead of them in the same round trip:
// a call's end on the replica that moved its run last is then one round
// trip, with no lock to take. The
// settlement does not depend on the guard: it is made whether or not the
// write is applied, and its rider's Result tells what it came to. A
// Locker that cannot write guarded writes nothing (applied false).
func (l RunLock[Op]) WriteGuarded(ctx context.Context, runID, stamp string, ops []Op, rider accounting.Rider) (applied bool, err error) {
	gw, ok := l.Locker.(GuardedWriter[Op])
	if !ok {
		return false, nil
	}
	settle, _ := rider.(*settleRider)
	if settle != nil && settle.b.rdb != l.Book.rdb {
		settle = nil
	}
	return gw.ApplyGuarded(ctx, runID, stamp, ops, nil, func(p redis.Pipeliner) {
		if settle != nil {
			settle.queue(ctx, p)
		}
	})
}

// Guarded reports whether the Locker can write guarded (WriteGuarded).
func (l RunLock[Op]) Guarded() bool {
	_, ok := l.Locker.(GuardedWriter[Op])
	return ok
}

// WriteReserving writes ops as WriteGuarded does, with a reservation
// (Book.PrepareReserve) ahead of them in the same round trip instead of
// a settlement: the write is applied only if the reservation was made
// (its hold exists) and the run's own ledger (ledger; "" for none) shows
// spent steps and reserved ones, this reservation's included, as the
// writer counted them: no call of another run (a sub-agent's) took a
// step on it unseen. A call's start on the replica that moved its run
// last is then one round trip. A refused write leaves the reservation,
// if made, to be released (ReleaseRider).
func (l RunLock[Op]) WriteReserving(ctx context.Context, runID, stamp string, ops []Op, res accounting.Prepared, ledger string, spent, reserved int64) (applied bool, err error) {
	gw, ok := l.Locker.(GuardedWriter[Op])
	pr, _ := res.(*preparedReserve)
	if !ok || pr == nil || pr.b.rdb != l.Book.rdb {
		return false, nil
	}
	conds := pr.conds()
	if ledger != "" {
		key := l.Book.ledgerKey(ledger)
		conds = append(conds, [3]string{key, "s1", strconv.FormatInt(spent, 10)},
			[3]string{key, "r1", strconv.FormatInt(reserved+pr.r.want.Steps, 10)})
	}
	return gw.ApplyGuarded(ctx, runID, stamp, ops, conds, func(p redis.Pipeliner) { pr.queue(ctx, p) })
}
