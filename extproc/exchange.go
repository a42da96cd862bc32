package extproc

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
)

var (
	codecChat      wire.Codec = openai.Chat{}
	codecResponses wire.Codec = openai.Responses{}
	codecMessages  wire.Codec = anthropic.Messages{}
)

// exchange is one HTTP request/response as Envoy reports it. Its methods run
// on the stream's goroutine only, so the turn needs no lock.
type exchange struct {
	s   *Server
	ctx context.Context // the stream's values, never its cancellation

	// Request side.
	hdr   headers
	codec wire.Codec
	prov  *config.Provider
	model bool   // a governed model call (the rest passes unprocessed)
	body  []byte // request body, accumulated if Envoy streams it
	// reqHeld: request body pieces were held back (body not BUFFERED).
	reqHeld bool
	ex      *pipeline.Exchange // the model call, once begun

	// Response side.
	streamed bool   // a 2xx text/event-stream relayed through the tap
	held     bool   // response chunks were held back (body not BUFFERED)
	resp     []byte // buffered response body
	ended    bool   // the response's last byte went through
	answered bool   // an ImmediateResponse ended the exchange
}

// handle answers one message from Envoy; done is true when the exchange is
// over for the server (an ImmediateResponse was sent).
func (x *exchange) handle(req *extprocv3.ProcessingRequest) (resp *extprocv3.ProcessingResponse, done bool) {
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		resp = x.requestHeaders(r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		resp = x.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		resp = x.responseHeaders(r.ResponseHeaders, req.Attributes)
	case *extprocv3.ProcessingRequest_ResponseBody:
		resp = x.responseBody(r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return resp, x.answered
}

// requestHeaders routes the call. A model call waits for its body (Envoy
// holds the headers while it buffers the body, so the header mutations are
// sent with the body's answer); anything else is released at once.
func (x *exchange) requestHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	x.hdr = readHeaders(h.GetHeaders())
	path := x.hdr.path()
	post := x.hdr.get(":method") == "POST"
	anthropicCaller := x.hdr.get("anthropic-version") != ""
	switch {
	case post && path == "/v1/chat/completions":
		x.codec, x.prov = codecChat, &x.s.o.OpenAI
	case post && path == "/v1/responses":
		x.codec, x.prov = codecResponses, &x.s.o.OpenAI
	case post && path == "/v1/messages":
		x.codec, x.prov = codecMessages, &x.s.o.Anthropic
	case strings.HasPrefix(path, "/v1/"):
		return x.passThrough(anthropicCaller)
	default:
		// Routing is Envoy's: a path the gateway does not govern is not ours
		// to refuse.
		return headersResponse(false, nil, skipRest())
	}
	x.model = true
	if _, ok := x.credential(); !ok {
		return x.immediate(&pipeline.Answer{Status: 401, ContentType: "application/json",
			Body: x.codec.ErrorBody(wire.ErrAuthentication, "unknown API key", nil)})
	}
	if h.GetEndOfStream() {
		return x.begin(true)
	}
	return headersResponse(false, nil, modelMode())
}

// passThrough lets any other /v1/* request through with the credential
// checked and swapped, unmetered, as the proxy's pass-through does.
func (x *exchange) passThrough(anthropicCaller bool) *extprocv3.ProcessingResponse {
	codec, prov := codecChat, &x.s.o.OpenAI
	if anthropicCaller {
		codec, prov = codecMessages, &x.s.o.Anthropic
	}
	if _, ok := x.credential(); !ok {
		return x.immediate(&pipeline.Answer{Status: 401, ContentType: "application/json",
			Body: codec.ErrorBody(wire.ErrAuthentication, "unknown API key", nil)})
	}
	m := &mutation{}
	x.swapKey(m, prov)
	return headersResponse(false, m.build(), skipRest())
}

func (x *exchange) credential() (pipeline.Principal, bool) {
	return x.s.o.Credentials.Resolve(pipeline.AgentKey(x.hdr.get("authorization"), x.hdr.get("x-api-key")))
}

// requestBody collects the body; at its end the call is begun.
func (x *exchange) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if !x.model {
		return bodyResponse(false, nil, nil)
	}
	x.body = append(x.body, b.GetBody()...)
	if !b.GetEndOfStream() {
		// Envoy streams the body although BUFFERED is required: hold each
		// piece back and send the whole (rewritten) body with the last.
		x.reqHeld = true
		return bodyResponse(false, nil, clearBody())
	}
	return x.begin(false)
}

// begin runs pipeline.Begin and either answers or forwards.
func (x *exchange) begin(headersOnly bool) *extprocv3.ProcessingResponse {
	if lim := x.s.o.Limits.MaxBodyBytes; lim > 0 && int64(len(x.body)) > lim {
		return x.immediate(&pipeline.Answer{Status: 413, ContentType: "application/json",
			Body: x.codec.ErrorBody(wire.ErrTooLarge, "request body exceeds the gateway's limit", nil)})
	}
	principal, _ := x.credential()
	call := &pipeline.Call{API: x.codec.API(), Body: x.body, Principal: principal}
	call.ReadHeaders(x.hdr.get)
	var rep *pipeline.Reply
	if x.ex, rep = x.s.p.Open(x.ctx, call, x.codec); rep != nil {
		return x.reply(*rep)
	}
	t := x.ex.Turn()

	m := &mutation{}
	for name := range x.hdr {
		// Run headers are the gateway's, never the provider's.
		if pipeline.IsRunHeader(name) {
			m.remove(name)
		}
	}
	// The tap reads the response as text: ask the upstream for no encoding,
	// as the proxy does.
	if x.hdr.get("accept-encoding") != "" {
		m.remove("accept-encoding")
	}
	x.swapKey(m, x.prov)
	// The router honours this header for the upstream call, stream
	// included: the per-call bound min(configured, remaining − reserve),
	// rounded up to whole milliseconds. Rounded down, the router's timer
	// fired up to a millisecond before the run reached its final reserve,
	// and the run's deadline, which ends the run when its timeout fires
	// inside that reserve, turned into a plain 504.
	if t.Timeout > 0 {
		m.set(headerUpstreamTimeout, strconv.FormatInt(upstreamTimeoutMs(t.Timeout), 10))
	}
	var body *extprocv3.BodyMutation
	changed := !bytes.Equal(t.UpstreamBody, x.body)
	if changed || x.reqHeld {
		body = replaceBody(t.UpstreamBody)
		m.set("content-length", strconv.Itoa(len(t.UpstreamBody)))
	}
	// The run's trace context travels upstream as traceparent; a no-op
	// when tracing is off.
	x.ex.Forward(m.set)
	if headersOnly {
		// No body message will come: nothing to mutate but headers.
		return headersResponse(false, m.build(), modelMode())
	}
	return bodyResponse(false, m.build(), body)
}

// swapKey replaces the agent's credential with the gateway-held provider
// key, when there is one.
func (x *exchange) swapKey(m *mutation, prov *config.Provider) {
	if prov.APIKey == "" {
		return
	}
	m.remove("authorization")
	m.remove("x-api-key")
	if prov == &x.s.o.Anthropic {
		m.set("x-api-key", prov.APIKey)
		if x.hdr.get("anthropic-version") == "" {
			m.set("anthropic-version", "2023-06-01")
		}
		return
	}
	m.set("authorization", "Bearer "+prov.APIKey)
}

// responseHeaders decides how the response is relayed: a 2xx event stream
// chunk by chunk through the tap, anything else buffered so that Finish can
// replace it.
func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders, attrs attributes) *extprocv3.ProcessingResponse {
	if !x.model || x.ex == nil || x.ended {
		return headersResponse(true, nil, nil)
	}
	rh := readHeaders(h.GetHeaders())
	if err := localFailure(attrs); err != nil {
		// Envoy's own reply for an upstream it could not reach: the proxy
		// sees a transport error here, so report the same.
		x.ended = true
		return x.reply(x.ex.Finish(nil, err))
	}
	status, _ := strconv.Atoi(rh.get(":status"))
	x.streamed = x.ex.Respond(status, strings.HasPrefix(rh.get("content-type"), "text/event-stream"))
	m := &mutation{}
	x.runHeaders(m, rh)
	if x.streamed {
		// The tap may change the body's length (include_usage strip).
		m.remove("content-length")
	}
	if h.GetEndOfStream() {
		x.ended = true
		if rep := x.ex.Finish(nil, nil); rep.Answer != nil || rep.Cut {
			return x.reply(rep)
		}
		m = &mutation{}
		x.runHeaders(m, rh)
		return headersResponse(true, m.build(), nil)
	}
	mode := bufferedResponse()
	if x.streamed {
		mode = streamedResponse()
	}
	// The run headers go out now as well: with BUFFERED they are
	// overwritten after Finish; were the override refused, the client still
	// gets them.
	return headersResponse(true, m.build(), mode)
}

// runHeaders sets the X-Run-* response headers as the run stands now and
// drops any the upstream sent.
func (x *exchange) runHeaders(m *mutation, upstream headers) {
	set := map[string]bool{}
	x.ex.Headers(func(name, value string) {
		m.set(name, value)
		set[strings.ToLower(name)] = true
	})
	for name := range upstream {
		if pipeline.HasRunPrefix(name) && !set[name] {
			m.remove(name)
		}
	}
}

// responseBody relays a stream through the tap, or collects a buffered
// body and lets Finish judge it.
func (x *exchange) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if !x.model || x.ex == nil || x.ended {
		return bodyResponse(true, nil, nil)
	}
	chunk := b.GetBody()
	eos := b.GetEndOfStream()
	if x.streamed {
		out, _ := x.ex.Feed(chunk)
		if eos {
			out = append(append([]byte(nil), out...), x.ex.End()...)
			x.ended = true
			rep := x.ex.Finish(nil, nil)
			if rep.Cut {
				// The upstream ended before the stream's terminal event:
				// once the response started, Envoy resets the client's
				// stream for an immediate response, so the client sees
				// an error rather than a clean end.
				return x.reply(rep)
			}
			// A held tool call goes out judged: as it came, or replaced.
			out = append(out, rep.Tail...)
		}
		if bytes.Equal(out, chunk) {
			return bodyResponse(true, nil, nil)
		}
		return bodyResponse(true, nil, replaceBody(out))
	}

	x.resp = append(x.resp, chunk...)
	if lim := x.s.o.Limits.MaxResponseBytes; lim > 0 && int64(len(x.resp)) > lim {
		x.ended = true
		return x.reply(x.ex.Finish(nil, errResponseTooLarge))
	}
	if !eos {
		// The BUFFERED override was refused: hold the pieces back and
		// send the whole body with the last one.
		x.held = true
		return bodyResponse(true, nil, clearBody())
	}
	x.ended = true
	rep := x.ex.Finish(x.resp, nil)
	if rep.Answer != nil {
		return x.reply(rep)
	}
	m := &mutation{}
	rep.Headers(m.set)
	var body *extprocv3.BodyMutation
	if x.held {
		body = replaceBody(x.resp)
	}
	return bodyResponse(true, m.build(), body)
}

var errResponseTooLarge = errors.New("upstream response exceeds the gateway's limit")

// immediate ends the exchange with the gateway's own answer, given before
// a call was begun.
func (x *exchange) immediate(a *pipeline.Answer) *extprocv3.ProcessingResponse {
	x.answered = true
	m := &mutation{}
	pipeline.AnswerHeaders(a, m.set)
	return immediateResponse(a, m.build())
}

// reply ends the exchange with the pipeline's reply: its answer, or the
// answer that tells the client its stream was cut, with the run headers.
func (x *exchange) reply(rep pipeline.Reply) *extprocv3.ProcessingResponse {
	if rep.Answer == nil && rep.Cut {
		rep.Answer = x.ex.CutAnswer()
	}
	x.answered = true
	m := &mutation{}
	rep.Headers(m.set)
	return immediateResponse(rep.Answer, m.build())
}

// runDone is closed when the run is cancelled or ends while this call is
// upstream; nil (never ready) otherwise.
func (x *exchange) runDone() <-chan struct{} {
	if x.ex == nil || x.ended || x.answered {
		return nil
	}
	if ctx := x.ex.Turn().Ctx; ctx != nil {
		return ctx.Done()
	}
	return nil
}

// runEnded ends a call whose run was cancelled or ended while it was
// upstream. Before the response started the client gets the run's end in
// its provider's format; mid-stream Envoy resets the stream, which cuts the
// upstream call as the proxy's cancellation does.
func (x *exchange) runEnded() *extprocv3.ProcessingResponse {
	x.ended = true
	return x.reply(x.ex.Finish(nil, context.Canceled))
}

// abort settles a call whose stream broke off: Finish runs exactly once,
// whatever happened.
func (x *exchange) abort(err error) {
	if x.ex == nil || x.ended || x.answered {
		return
	}
	x.ended = true
	// Whatever Envoy reports (EOF, reset, cancel), for the call it means
	// the client is gone: the proxy sees the same as a cancelled context.
	// (An upstream reset mid-stream reaches here the same way: Envoy
	// resets the client's stream and closes this one, and nothing on it
	// tells the two apart.)
	x.s.log.Debug("ext_proc stream ended early", "run_id", x.ex.RunID(), "err", err)
	x.ex.Abort()
	x.ex.Finish(nil, context.Canceled)
}

// upstreamTimeoutMs is a call's timeout as the router's header gives it:
// whole milliseconds, rounded up, at least one.
func upstreamTimeoutMs(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}
