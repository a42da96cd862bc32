// Package pebblestore is the embedded store on Pebble, a log-structured
// key-value engine: its write-ahead log, memtable and compactions do what
// the store package's own log, overlay and checkpoints into bbolt do.
//
// A bucket is a one-byte key prefix (its place in store.AllBuckets, plus
// one); the byte 0 keeps the store's own marker of an open database. Writes
// go through store.GroupCommitter, so Later, CancelLater and the order of
// commits are the bbolt store's: a commit is one Pebble batch applied with
// an fsync of Pebble's log before it is acknowledged. Pebble's log buffers
// a write that asks for no fsync in the process until a block fills, so
// without one a killed process could lose an acknowledged commit; the
// bbolt store's "interval" policy (written to the kernel, fsynced on a
// period) has no equivalent here, and both policies fsync.
//
// Damage is Pebble's to find: opening replays its log, dropping a torn
// tail of the newest log file (the one write a crash can interrupt)
// without a warning, and fails with an error pebble.IsCorruptionError
// knows on damage a later record of the log shows to be damage. Damage in
// the newest log's last block has no later record to show it, and is
// taken for a torn tail. Check reads a store without changing it; Pebble
// has no repair.
package pebblestore
