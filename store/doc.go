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
// period, or sooner once the log holds too many keys or bytes, and deletes
// the segments it absorbed; until then reads see the
// log's writes through an in-memory overlay. Opening the store replays the
// segments a previous process left, so a crash between a commit and its
// checkpoint loses nothing; a record torn by a power loss is dropped whole.
// A write nobody waits for (Later) joins the head of the next commit, or
// is committed on its own within a millisecond: until then it is only in
// memory.
package store
