// Package store keeps what must outlive the process — runs, their events,
// the lineage index, ledgers and open reservations — behind one small
// interface, with an embedded implementation on a bbolt file (Bolt).
//
// Values are opaque bytes: the pipeline encodes and decodes them. The store
// must not hold business rules; it orders, batches and persists.
//
// Write policy of Bolt: writes are queued and committed in groups: every
// write queued while the previous commit ran (at most MaxBatch) becomes one
// record appended to a write-ahead log. A writer that needs durability waits
// on the channel Apply returns. Under SyncInterval (the default) the commit
// is acknowledged once the record is written (the kernel holds it: a killed
// or restarted process loses nothing) and the log is fsynced on a period,
// which bounds what a power loss can take; under SyncAlways it is
// acknowledged after the log's fsync. A background checkpoint moves the
// log into the bbolt file (bbolt's own fsyncs, off the call path) on a
// period, or sooner once the log holds too many keys or bytes or the
// overlay too much memory (CheckpointMemory), and deletes the segments it
// absorbed; until then reads see the log's writes through an in-memory
// overlay. Opening the store replays the
// segments a previous process left, so a crash between a commit and its
// checkpoint loses nothing.
//
// Damage is loud, never silent. A log record is whole when its length
// fits the segment, its ops decode and its CRC-32C holds (an empty record
// is never written, so zeros are not one). Opening the store reads the
// whole log before applying any of it:
//
//   - A torn tail is a record that is not whole in the newest segment,
//     when no whole record begins at any later offset of that segment:
//     the one write a crash can interrupt. Opening cuts it off (the
//     segment is truncated to its whole records) with a warning naming the
//     segment, the offset and the bytes dropped; the commit it held is
//     lost as a whole, never half applied. To keep this the only place a
//     power loss tears, a checkpoint fsyncs the segment it seals before
//     the next one is fsynced.
//   - Anything else is damage: a record that is not whole in an older
//     segment, or one followed by a whole record. Replaying past it would
//     apply later writes without the ones lost before them (a settlement
//     without its reservation: spend that can be spent again), so opening
//     fails with a *DamageError naming the segment, the offset and the
//     commands `gateway store check` and `gateway store repair`. So it
//     does when the search for a whole record after the damage gives up
//     (maxSearchHash).
//   - bbolt takes the other meta page, silently, when one is damaged: the
//     transaction before, which loses the last checkpoint when the damaged
//     page was the newer. The meta pages are read (their layout and
//     checksum are bbolt's file format) before bbolt opens the file, and a
//     damaged one fails the open as well.
//   - bbolt panics on a page it cannot read, and reading a page number
//     past the file's end is a fault: opening, replaying, reads and
//     checkpoints turn both into a *DamageError (guard) rather than a
//     crash at every start.
//
// Check reads it all without changing it (and bbolt's tx.Check over the
// file); Repair keeps the records before the first damage, moves the
// damaged segment (a copy of it) and every newer one aside as
// NAME.damaged-TIME, and rewrites a damaged meta page from the other. A
// bbolt file whose pages are damaged is not rebuilt: it comes from a
// backup, or goes aside for an empty store.
// A write nobody waits for (Later) joins the head of the next commit, or
// is committed on its own within a millisecond: until then it is only in
// memory.
//
// Cached puts a bounded read cache (ristretto) in front of some buckets of
// the embedded store: it learns of each write from the commit that makes
// it visible, and serves a record only while no commit wrote its key since
// it was read (cache.go). It is a cache, never where a record lives.
package store
