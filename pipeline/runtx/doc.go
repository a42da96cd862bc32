// Package runtx owns a run's transaction: the one place where a call on a
// run takes the run's lock across replicas (Lock, LockReader, LockRiding),
// its mutex, catches up with the run's newest stored state, and writes
// what it changed — now, behind a forwarded call, or with the store's next
// commit — letting go of the lock in that commit when the lock can be
// (docs/design.md §1, "A model call's path"; §9, "Several replicas"). It
// also writes a run without its lock when the lock can guard the write by
// the stored run (Guarded: WriteGuarded with a settlement, WriteReserving
// with a reservation); what to do when the guard refuses is the
// pipeline's.
//
// What a run is made of is the pipeline's: its snapshot's encoding, the
// writes queued with it and how a newer stored state replaces the one in
// memory come in through Runs. runtx knows runs only as runstate.Run and
// the store only as store.Store.
package runtx
