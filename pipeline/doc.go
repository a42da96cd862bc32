// Package pipeline is the transport-free core of the gateway. Both front
// ends (the fasthttp proxy and Envoy ext_proc) drive every model call
// through the same three steps:
//
//	Begin  → parse → identify run → admit (docs/design.md §5 order) → rewrite    (before forwarding)
//	Feed   → usage read on the side while the response streams; a tool call held
//	Finish → settle or release the reservation → loop/stall → record     (exactly once)
//	Release → the held tool call, unchanged or replaced by the final answer
//	ReadBack → when the answer called the gateway's read tool (offered with
//	           cut tool output): its results, and the next round's Begin
//
// A front end drives those steps through an Exchange (exchange.go: Open,
// Forward, Respond, Feed, End, Finish, which gives the Reply to write) and
// a tool call through a ToolExchange; the header names both front ends
// read and write are defined once, in headers.go.
//
// It composes the domain packages (runstate, accounting, policy, loopguard)
// and turns their verdicts into termination reasons, wrap-up calls and
// finalize / reject answers rendered by the wire codecs. A run's end ends
// its sub-agent runs too (cascade.go).
//
// It also keeps side effects one at a time (serial.go): a model offered an
// L1/L2 tool is asked for one tool call at a time, and the tool routes run
// a run's L1/L2 calls one after the other in arrival order.
//
// Each stage that moves a run does so inside the run's transaction
// (runtx): the run lock across replicas, the run's mutex, the refresh from
// the store, and the commit of what the stage changed. The pipeline
// supplies what a run's snapshot holds (persist.go) and how a newer one
// replaces the run in memory (replica.go). With replicas, a call's start
// and end on the replica that made the run or moved it last skip the
// lock: their writes are guarded by the stored run, and a refused one is
// made again under the lock, what it told the observer held back until
// then (optimistic.go).
//
// Runs, their events, ledgers and holds are stored as JSON records
// (persist.go): format 1, told by its first byte, so that a later format
// can be read beside it. The records written on every call are appended by
// hand (runstate, accounting); the rest is encoding/json's.
//
// It must not import fasthttp, gRPC or net/http, nor read provider JSON
// itself: wire codecs do that.
package pipeline
