package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/haltline/haltline/wire"
)

// Exchange is one model call as a front end drives it, whatever its
// transport. A front end makes these calls, in this order:
//
//	x, rep := p.Open(ctx, call, codec)    // identify, admit, rewrite; rep != nil: the gateway answers, write rep
//	x.Forward(set)                        // the call goes upstream now; set takes the headers to propagate
//	stream := x.Respond(status, sse)      // the upstream's headers arrived; a 2xx event stream goes through Feed
//	out, done := x.Feed(chunk)            // a stream's pieces, what the client gets now; done at its terminal event
//	out = x.End()                         // the upstream's stream ended: what the tap still held
//	rep := x.Finish(body, err)            // settle and judge, once (a later call gives an empty Reply)
//
// and writes rep (Reply): its Headers, then its Answer in place of the
// upstream's answer when it has one, else the upstream's answer (for a
// stream, what Feed and End gave, then rep.Tail). Abort, when the client
// goes away, ends the upstream call; Finish still follows. Headers gives
// the run headers before Finish, for a stream whose headers go out first.
// A call that offers the gateway's read tool takes more rounds (Next).
type Exchange struct {
	p   *Pipeline
	ctx context.Context // Begin's, Finish's and ReadBack's: values, never a cancellation
	t   *Turn

	status   int
	streamed bool
	ended    bool // End ran on this round's stream
	finished bool // Finish ran on this round
	// sent is when the round went upstream (Forward); firstByte the wait
	// on its answer's headers (Respond); waited the wait of the rounds
	// finished before.
	sent      time.Time
	firstByte time.Duration
	waited    time.Duration
}

// Reply is what the gateway gives the client once Finish ran.
type Reply struct {
	// Answer, when set, replaces the upstream's answer whole: status,
	// content type (Headers) and body.
	Answer *Answer
	// Tail is what a stream's client receives after what Feed and End
	// gave: a held tool call, judged (as it came, or replaced by the final
	// answer that ends the same stream).
	Tail []byte
	// Cut is set when the upstream broke a stream off before its terminal
	// event (Turn.Cut): the front end ends it with Exchange.CutEvent, or
	// replaces it with Exchange.CutAnswer where it cannot add to it.
	Cut bool

	x *Exchange
}

// Open begins the call (Begin). When the gateway answers it itself
// (refusal, wrap-up answered without a model call, bad request), the call
// is finished at once and the Reply is returned to be written instead of
// forwarding.
func (p *Pipeline) Open(ctx context.Context, call *Call, codec wire.Codec) (*Exchange, *Reply) {
	x := &Exchange{p: p, ctx: ctx, t: p.Begin(ctx, call, codec)}
	if x.t.Answer != nil {
		return x, x.answered()
	}
	return x, nil
}

// answered finishes a turn the gateway answered at Begin.
func (x *Exchange) answered() *Reply {
	x.p.Finish(x.ctx, x.t, Outcome{})
	x.finished = true
	return &Reply{Answer: x.t.Answer, x: x}
}

// Turn is the call's turn: the body to forward (UpstreamBody), its
// timeout, its context (cancelled when the run ends or Abort runs), the
// parsed request.
func (x *Exchange) Turn() *Turn { return x.t }

// RunID is the name of the run the call was attributed to.
func (x *Exchange) RunID() string { return x.t.RunID() }

// Forward tells the pipeline that the round goes upstream now; set
// receives the headers to propagate (traceparent) when tracing is on.
func (x *Exchange) Forward(set func(name, value string)) {
	x.p.Forwarding(x.t, set)
	x.sent = time.Now()
	x.status, x.streamed, x.ended, x.firstByte = 0, false, false, 0
}

// Respond records the upstream's status as its answer's headers arrive,
// and reports whether the answer is a stream to relay through Feed (a 2xx
// event stream); any other is given whole to Finish.
func (x *Exchange) Respond(status int, eventStream bool) bool {
	x.status = status
	x.firstByte = time.Since(x.sent)
	x.streamed = eventStream && status >= 200 && status <= 299
	return x.streamed
}

// Feed passes a piece of the stream through the usage tap and returns what
// the client receives now (Turn.Feed); done reports that the stream's
// terminal event was read, when the front end settles (Finish) before it
// relays anything more.
func (x *Exchange) Feed(chunk []byte) (out []byte, done bool) {
	out = x.t.Feed(chunk)
	return out, x.t.Done()
}

// Terminal reports whether event, one whole SSE event not yet fed, is the
// stream's terminal event.
func (x *Exchange) Terminal(event []byte) bool { return x.t.Terminal(event) }

// End returns what the tap still holds at the upstream's end of the
// stream (Turn.End).
func (x *Exchange) End() []byte {
	x.ended = true
	return x.t.End()
}

// Abort ends the upstream call (its client went away). Finish must still
// follow.
func (x *Exchange) Abort() { x.t.Abort() }

// Finish settles the round: body is a whole answer's body, err what broke
// the exchange (a transport error, an answer too large, the client or run
// gone). A whole answer that did not arrive whole is reported as no answer
// at all; a stream keeps its status, and one the front end did not End is
// ended here. It runs once a round: a later call returns an empty Reply.
func (x *Exchange) Finish(body []byte, err error) Reply {
	rep := Reply{x: x}
	if x.finished {
		return rep
	}
	x.finished = true
	out := Outcome{Status: x.status, Body: body, Streamed: x.streamed, Err: err,
		UpstreamWait: time.Since(x.sent), FirstByte: x.firstByte}
	x.waited += out.UpstreamWait
	if x.streamed {
		out.Body = nil
		if !x.ended && err != nil {
			x.End() // what broke off mid-stream: the tap reads what it had
		}
		// Read before Finish: the settlement ends the turn.
		rep.Cut = x.t.Cut()
	} else if err != nil {
		out.Status, out.Body = 0, nil
	}
	rep.Answer = x.p.Finish(x.ctx, x.t, out)
	if rep.Answer == nil && err != nil {
		msg := "upstream failed"
		if errors.Is(err, context.Canceled) {
			msg = "call cancelled"
		}
		rep.Answer = errorAnswer(x.t.codec, wire.ErrBadGateway, msg, nil)
	}
	rep.Tail = x.t.Release()
	return rep
}

// Next moves a call whose forwarded request offered the gateway's read
// tool (Turn.ReadBackOffered) to its next round, once Finish judged an
// answer that called that tool: it reports false when there is none. The
// next round goes upstream as the first did (Forward …), unless rep is
// set: the gateway's own answer, to write instead.
func (x *Exchange) Next() (ok bool, rep *Reply) {
	next := x.p.ReadBack(x.ctx, x.t)
	if next == nil {
		return false, nil
	}
	x.t, x.finished = next, false
	if next.Answer != nil {
		return true, x.answered()
	}
	return true, nil
}

// Waited is the time spent waiting on the upstream: every round finished,
// and the round in flight up to its answer's headers. A front end that
// reports its own overhead subtracts it from the call's time.
func (x *Exchange) Waited() time.Duration {
	if x.finished {
		return x.waited
	}
	return x.waited + x.firstByte
}

// CutEvent is the provider's stream error event telling the client that
// its stream was cut (Reply.Cut).
func (x *Exchange) CutEvent() []byte { return x.t.CutEvent() }

// CutAnswer is the answer that tells a client its stream was cut
// (Reply.Cut), for a front end that cannot add CutEvent to the stream.
func (x *Exchange) CutAnswer() *Answer { return x.t.CutAnswer() }

// Headers calls set for each run header (X-Run-*) as the run stands now:
// for a stream, whose headers go out before Finish.
func (x *Exchange) Headers(set func(name, value string)) { x.p.Headers(x.t, set) }

// Headers calls set for each header the gateway puts on the client's
// answer: the Answer's own (AnswerHeaders), when it replaces the
// upstream's, and the run headers.
func (r *Reply) Headers(set func(name, value string)) {
	if r.Answer != nil {
		AnswerHeaders(r.Answer, set)
	}
	r.x.Headers(set)
}
