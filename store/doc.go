// Package store keeps what must outlive the process — runs, their events,
// the lineage index, ledgers and open reservations — behind one small
// interface, with an embedded implementation on a bbolt file (Bolt).
//
// Values are opaque bytes: the pipeline encodes and decodes them. The store
// must not hold business rules; it orders, batches and persists.
//
// Write policy of Bolt: writes are queued and committed in groups (one
// bbolt transaction, one fsync, for every write queued while the previous
// commit ran, at most MaxBatch), so the cost of an fsync is shared by the
// calls in flight. A writer that needs durability waits on the channel
// Apply returns.
package store
