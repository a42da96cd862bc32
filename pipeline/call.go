package pipeline

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/sse"
)

// Principal is who the agent's credential names.
type Principal struct {
	Tenant, Team, User, KeyID string
}

// Call is one model call as a front end received it.
type Call struct {
	API  wire.API
	Body []byte // read-only: the rewrite stage returns a new body
	// Run headers (docs/design.md §3), as sent.
	RunID, SessionID, AgentID, ParentRunID, TaskType, RunBudget string
	Principal                                                   Principal
	// Upstream, when the front end can, sends a request of the gateway's
	// own to the same provider with the caller's credentials (the context
	// manager's summary call); nil where it cannot (ext_proc).
	Upstream func(ctx context.Context, body []byte) (status int, respBody []byte, err error)
	// ReadsBack is set by a front end that runs the read-back rounds of a
	// call (Turn.ReadBackOffered, ReadBack): only then does a forwarded
	// request offer the gateway's read tool.
	ReadsBack bool

	// A read-back round (ReadBack): the run it continues, and how many
	// rounds the client's request has taken before it.
	run       *runstate.Run
	readRound int
}

// Answer is a response the gateway gives itself, without (or instead of)
// the upstream's.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
	// NoRetry adds x-should-retry: false (docs/design.md §12).
	NoRetry bool
}

// Outcome is what happened upstream, reported to Finish.
type Outcome struct {
	// Status is the upstream HTTP status; 0 when no response arrived.
	Status int
	// Body is the non-streamed 2xx response body.
	Body []byte
	// Streamed is true when the response was relayed through Feed.
	Streamed bool
	// Err is the transport error, if any (timeout, reset, cancellation).
	Err error
	// UpstreamWait is the time spent waiting on the upstream.
	UpstreamWait time.Duration
	// FirstByte is the time from forwarding to the upstream's first
	// response byte (its headers); 0 when none arrived.
	FirstByte time.Duration
}

// CallReport is one model call as Finish saw it, for the per-call metrics,
// log line and upstream span. It carries no prompt, no tool argument and no
// key: only what an SRE may read.
type CallReport struct {
	RunID, SessionID, Tenant, Team string
	API, Provider                  string
	// Model is the requested model as sent: any string, so a log and span
	// attribute, never a metric label.
	Model        string
	Status       int // what the agent received
	Step         int64
	Started, End time.Time
	// Total is request to answer; Upstream the wait on the upstream;
	// FirstByte the upstream's time to its first byte.
	Total, Upstream, FirstByte time.Duration
	Usage                      wire.Usage
	Cost                       accounting.Money
	FinishReason               string
	ToolCalls                  int
	WrapUp                     bool
	Err                        error
	// Trace is what Observer.UpstreamStart returned; nil when the call was
	// not forwarded by this process.
	Trace any
}

// Turn is one call's passage through the pipeline.
type Turn struct {
	Call  *Call
	Req   wire.Request
	codec wire.Codec
	run   *runstate.Run

	// Answer, when set by Begin, is given instead of forwarding.
	Answer *Answer
	// UpstreamBody is the body to forward.
	UpstreamBody []byte
	// Timeout bounds the upstream call: min(configured, remaining − final reserve).
	Timeout time.Duration
	// Ctx is cancelled when the run is cancelled or ends, or the front end
	// aborts the call (Abort); the upstream call runs under it.
	Ctx    context.Context
	cancel context.CancelFunc
	unreg  func()

	step     int64
	wrapUp   bool
	wrapLine string
	wrapOut  int64
	// inputEst is the context manager's estimate of the body's input
	// tokens, once the reservation has weighed it (0 before).
	inputEst int64
	// pendingEnd is a loop or stall verdict found while observing the
	// request's tool results, applied in admission order.
	pendingEnd *runstate.Termination
	// reserveLater, on a call begun without the run's lock (beginGuarded),
	// makes the reservation ready to go with the run's guarded write:
	// prepared, taken as made until the write is back.
	reserveLater preparingReserver
	prepared     accounting.Prepared
	tells        *[]func() // for the run's governance made meanwhile (governance.held)
	// settleLater: the settlement rides with the run's guarded write
	// (finishGuarded), whose round trip has not gone yet when settle runs;
	// its result is read after it (settled).
	settleLater bool
	res         *accounting.Hold
	resKey      []byte // the reservation's key in the store
	reserved    accounting.Vector
	price       accounting.Price
	priced      bool
	tap         wire.StreamTap
	// A streamed tool call held until judged (Feed, Release): the tap's
	// bytes since it began, and what replaces them when the run ends on it.
	holding, released bool
	held, replacement []byte
	// carry is the head of an event not yet whole (not yet relayed); whole
	// the buffer of the events it completed.
	carry, whole []byte
	started      time.Time
	finished     bool
	// For the call's report: what settle read, and the observer's handle.
	usage        wire.Usage
	cost         accounting.Money
	finishReason string
	toolCalls    int
	trace        any
	// rec is the call as recorded (record.go), nil unless the run is recorded.
	rec *CallRecord
	// headroom is what the reservation, then the settlement, left on the
	// run's ledgers, when the book read it with them (headroomReserver,
	// headroomSettler), for Headers.
	headroom     accounting.Vector
	headroomRead bool
	// ledgerAtLock is the run's own ledger as Begin's run lock read it
	// (RunLockReader) or, for a new run, as the book made it
	// (ensureReader), for admission; nil otherwise.
	ledgerAtLock *accounting.LedgerSnapshot
	// ledgerReadAtLock: the lock read the run's ledger (a nil
	// ledgerAtLock then means it did not exist).
	ledgerReadAtLock bool
	// ahead is the run's ledgers govern left for the reservation to make
	// in its round trip; nil once made (makeLedgers).
	ahead []accounting.LedgerSpec
	// cutHeld is set when the forwarded request holds cut tool output;
	// readOffer when it offers the read tool for it, and readAnswer is an
	// answer that called it, for ReadBack.
	cutHeld, readOffer bool
	readAnswer         *wire.Response
	// committing is Begin's commit, made behind the forwarded call, for
	// Finish to land; none when Begin committed in line.
	committing runtx.Pending
}

// Feed passes a piece of the upstream stream through the usage tap and
// returns what the client must receive now.
//
// From the read in which a tool call's first event is complete, Feed
// returns nothing and keeps the tap's bytes until Finish has judged the
// answer; Release then gives them (or their replacement). The hold lasts
// to the upstream's end rather than to the call's last delta: tool calls
// end a turn in all three APIs, so little follows them but the finish and
// the usage, and judging the whole answer is judging it as the
// non-streamed path does, with the same code. Text that arrived before
// keeps flowing as it arrives; text that shares the tool call's first read
// waits with it. Until the hold, only whole events go out (an event cut
// by a read waits for its end, which no SSE client can do without): what
// the client has is then always a stream that the final answer can
// continue, and never the head of a tool call's event.
func (t *Turn) Feed(chunk []byte) []byte {
	tap := t.streamTap()
	out := tap.Feed(chunk)
	switch {
	case t.released:
		if t.replacement != nil {
			return nil // the stream was ended by the final answer
		}
		return out
	case t.holding || tap.ToolStarted() || t.readOffer:
		// A call that offers the read tool is held whole: its answer may
		// be the gateway's to answer, and then none of it is the agent's.
		if !t.holding {
			// Room for a tool call and the stream's end, usually whole.
			t.holding = true
			t.held = make([]byte, 0, max(4<<10, 2*(len(t.carry)+len(out))))
		}
		t.held = append(append(t.held, t.carry...), out...)
		t.carry = t.carry[:0]
		return nil
	}
	return t.wholeEvents(out)
}

// wholeEvents returns the whole events of the bytes carried from the last
// Feed and out, and carries the bytes after the last one.
func (t *Turn) wholeEvents(out []byte) []byte {
	if len(t.carry) == 0 {
		i := sse.LastEventEnd(out)
		if i == len(out) {
			return out // the common case: a read ends with an event
		}
		t.carry = append(t.carry, out[i:]...)
		return out[:i]
	}
	t.carry = append(t.carry, out...)
	i := sse.LastEventEnd(t.carry)
	if i == 0 {
		return nil
	}
	t.whole = append(t.whole[:0], t.carry[:i]...)
	t.carry = append(t.carry[:0], t.carry[i:]...)
	return t.whole
}

// Holding reports that Feed holds a tool call that Release has not given
// out yet: the front end settles (Finish) before the stream's last bytes.
func (t *Turn) Holding() bool { return t.holding && !t.released }

// Release returns, once Finish ran, what Feed held: the upstream's bytes
// unchanged when the run goes on, or the final answer that ends the same
// stream when it ended on this answer. It returns nil when nothing is
// held, and gives the bytes once.
func (t *Turn) Release() []byte {
	if !t.Holding() {
		return nil
	}
	t.released = true
	if t.replacement != nil {
		return t.replacement
	}
	return t.held
}

// Terminal reports whether event, one whole SSE event not yet fed, is the
// stream's terminal event.
func (t *Turn) Terminal(event []byte) bool { return t.streamTap().Terminal(event) }

func (t *Turn) streamTap() wire.StreamTap {
	if t.tap == nil {
		t.tap = t.codec.NewStreamTap(&t.Req)
	}
	return t.tap
}

// Done reports that the stream's terminal event has been read: the front
// end settles (Finish) before it relays those bytes.
func (t *Turn) Done() bool { return t.tap != nil && t.tap.Done() }

// End returns what the tap still holds at the end of the stream (kept
// with a held tool call, for Release).
func (t *Turn) End() []byte {
	if t.tap == nil {
		return nil
	}
	out := t.tap.End()
	if t.Holding() {
		t.held = append(t.held, out...)
		return nil
	}
	if len(t.carry) > 0 { // an unterminated last event, passed on as it came
		out = append(t.carry, out...)
		t.carry = nil
	}
	return out
}

// Cut reports a stream that ended before its terminal event ([DONE],
// response.completed, message_stop) while its call was still wanted (not
// aborted; the run neither cancelled nor ended) and without an error event
// of the provider's own: the upstream broke it off (a reset, an EOF, its
// timeout). The front end then sends CutEvent and ends the response
// without the clean end of its framing, so that the client raises an error
// instead of taking a partial answer for a whole one; Finish records the
// call as a model error.
func (t *Turn) Cut() bool {
	if t.Done() || (t.Ctx != nil && t.Ctx.Err() != nil) {
		return false
	}
	return t.tap == nil || t.tap.Response().ErrorMessage == ""
}

// CutEvent is the provider's stream error event telling the client that
// its stream was cut.
func (t *Turn) CutEvent() []byte {
	return wire.ErrorEvent(t.codec, wire.ErrBadGateway, cutMessage)
}

// CutAnswer is the answer that tells a client its stream was cut, for a
// front end that cannot add CutEvent to the stream but can replace it
// (ext_proc: Envoy resets a client's stream whose headers went out).
func (t *Turn) CutAnswer() *Answer {
	return errorAnswer(t.codec, wire.ErrBadGateway, cutMessage, nil)
}

// ErrStreamCut is a stream's end before its terminal event (Cut). It wraps
// io.ErrUnexpectedEOF: for the client it is one.
var ErrStreamCut = fmt.Errorf("%s: %w", cutMessage, io.ErrUnexpectedEOF)

const cutMessage = "upstream stream ended before its terminal event"

// RunID is the name of the run the call was attributed to, as its
// X-Run-Id says ("" before identification).
func (t *Turn) RunID() string {
	if t.run == nil {
		return ""
	}
	return runstate.NameOf(t.run.ID)
}

// Abort cancels the turn's context (its client went away): the upstream
// call ends. Finish must still follow.
func (t *Turn) Abort() {
	if t.cancel != nil {
		t.cancel()
	}
}
