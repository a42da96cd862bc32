package store

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
)

// Bucket names a kind of record.
type Bucket string

// The buckets.
const (
	Runs         Bucket = "runs"         // run id → run snapshot
	Events       Bucket = "events"       // run id \x00 seq (8 bytes, big endian) → event
	Lineage      Bucket = "lineage"      // lineage key → run id
	Ledgers      Bucket = "ledgers"      // ledger key → ledger state
	Reservations Bucket = "reservations" // reservation key → open reservation
	Idempotency  Bucket = "idempotency"  // run id \x00 call key → stored tool result
	Approvals    Bucket = "approvals"    // ticket → approval (run id inside)
	Blobs        Bucket = "blobs"        // handle → full text of a cut tool result (run id inside)
	Recordings   Bucket = "recordings"   // run id → the run's recording for replay (pipeline/record.go)
	Unfinished   Bucket = "unfinished"   // run id → "1" while the run's stored snapshot is not final (pipeline/restore.go)
	Ended        Bucket = "ended"        // end time (8 bytes, big endian, Unix ns) run id → the run's keys Owned does not hold ("1": none); runs by their end (pipeline/retain.go)
	Owned        Bucket = "owned"        // run id \x00 version (8 bytes, big endian) → keys of other buckets the run wrote (pipeline/retain.go)
)

// LockRelease is not a bucket of records: an op in it lets go of a lock
// that replicas sharing the store take on a run (Key: the lock, Value: its
// holder's token), in the commit that carries what was written under the
// lock, after those writes. Only a store that hands out such locks takes it
// (redisstore's LockRead); the embedded store refuses it as it refuses any
// unknown bucket.
const LockRelease Bucket = "lock-release"

// Stamp names a stored value for a write guarded by it (redisstore's
// ApplyGuarded): its SHA-1 in hex, which Redis computes of what it holds
// (redis.sha1hex), so that the store compares values it does not read.
func Stamp(v []byte) string {
	sum := sha1.Sum(v)
	return hex.EncodeToString(sum[:])
}

// AllBuckets lists every bucket. The log numbers buckets by their place
// here: a new one goes at the end.
var AllBuckets = []Bucket{Runs, Events, Lineage, Ledgers, Reservations, Idempotency, Approvals, Blobs, Recordings, Unfinished, Ended, Owned}

// Op is one write: a put, or a delete when Value is nil.
type Op struct {
	Bucket Bucket
	Key    []byte
	Value  []byte
}

// Writes reports whether op writes (or deletes) key in bucket b.
func (op Op) Writes(b Bucket, key []byte) bool { return op.Bucket == b && bytes.Equal(op.Key, key) }

// Store persists batches of writes atomically and reads them back at start.
type Store interface {
	// Apply queues the ops to be committed together, in order, atomically.
	// A receive from the channel gives the commit's result (the channel
	// may be a closed one shared by successful commits: receive once).
	// The ops' keys and values are handed over: the store may keep them
	// as they are until they are checkpointed, and the caller must not
	// change their bytes afterwards.
	Apply(ops []Op) <-chan error
	// Later queues ops nobody waits for: they are committed ahead of the
	// next Apply's, in the same commit, or on their own within a
	// millisecond — until then a crash of the process can lose them.
	Later(ops []Op)
	// CancelLater drops the Later ops writing key in bucket b that no
	// commit has taken yet, and reports whether it dropped any (see
	// GroupCommitter.CancelLater for when a following delete may go).
	CancelLater(b Bucket, key []byte) bool
	// Get returns one record, or nil when there is none.
	Get(b Bucket, key []byte) ([]byte, error)
	// GetMany calls fn with the record of each key (nil when there is
	// none), in the order of keys, after reading them a batch at a time: a
	// transaction or a round trip a batch rather than a key. fn may use
	// the store; the value is the caller's.
	GetMany(b Bucket, keys [][]byte, fn func(i int, value []byte) error) error
	// Scan calls fn for every record of a bucket, in key order.
	Scan(b Bucket, fn func(key, value []byte) error) error
	// ScanPrefix calls fn for every record of a bucket whose key starts with prefix.
	ScanPrefix(b Bucket, prefix []byte, fn func(key, value []byte) error) error
	// Healthy reports whether writes are succeeding.
	Healthy() error
	// Close commits what is queued and closes the store.
	Close() error
}

// GetManyBatch is how many keys a store's GetMany reads at a time: one
// bbolt read transaction (which holds off the remap of a checkpoint that
// grows the file while it lasts) or one Redis round trip.
const GetManyBatch = 256

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("store: closed")

// EventKey is the key of a run's event.
func EventKey(runID string, seq int64) []byte {
	k := make([]byte, 0, len(runID)+9)
	k = append(k, runID...)
	k = append(k, 0)
	for i := 7; i >= 0; i-- {
		k = append(k, byte(uint64(seq)>>(8*i)))
	}
	return k
}
