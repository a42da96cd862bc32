// Package redisstore owns the store on Redis (Store, a store.Store) and
// the run lock several gateway replicas take on it, so that they share
// persisted runs (docs/design.md §9). The ledger book that shares its
// server and client is accounting/redisbook's: this package holds opaque
// bytes and knows no domain type. Another user of the same client may
// add its commands to a lock's round trip (LockRead's ride).
//
// # Keys
//
// Under the prefix (DefaultPrefix "haltline:"): store:<bucket>:vals (hash
// key → value), store:<bucket>:keys (sorted set of keys, score 0, read
// with ZRANGEBYLEX for byte order) and lock:run:<id> (a run's lock, a key
// set with NX and a TTL).
//
// # Failure
//
// Open sets short socket timeouts (1 s dial, read and write, one retry), so
// while Redis is unreachable every call returns an error within about two
// seconds and the pipeline fails closed; go-redis redials by itself, so the
// same Store works again when Redis is back. Durability across a Redis
// restart is Redis's own (appendonly).
//
// Store writes are group-committed like Bolt's: one goroutine sends
// everything queued since its last commit as one MULTI/EXEC; a commit may
// carry the release of a run's lock (store.LockRelease) after its writes.
// ApplyGuarded writes a run's commit without its lock, by itself: one
// script that applies it only while the lock is free, the stored snapshot
// is the writer's (its SHA-1; none, for a new run) and the conditions
// another user of the client sets hold, that user's commands riding
// ahead of it.
package redisstore
