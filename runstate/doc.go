// Package runstate owns what a run is: its identity and lineage (which run
// a call without run headers continues, which runs are its sub-agents), the state machine of docs/design.md §4, the
// counters, the event log with monotonic timestamps, and the termination
// record of docs/design.md §5.
//
// It must not touch wire formats, prices, policy or transports: the pipeline
// hands it plain values (ids, usage, money as integers) and asks it for
// records.
package runstate
