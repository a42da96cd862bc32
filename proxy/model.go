package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/sse"
)

// model governs one model call: Begin, forward, relay, Finish.
func (s *Server) model(ctx *fasthttp.RequestCtx, codec wire.Codec, prov *config.Provider) {
	received := time.Now()
	principal, ok := s.credential(ctx)
	if !ok {
		writeAnswer(ctx, &pipeline.Answer{Status: 401, ContentType: "application/json",
			Body: codec.ErrorBody(wire.ErrAuthentication, "unknown API key", nil)})
		return
	}
	body, release, rerr := s.readPooledBody(ctx, s.o.Limits.MaxBodyBytes)
	if rerr != nil {
		release()
		refuseBody(ctx, codec, rerr)
		return
	}
	// The body goes back to its pool once the call is settled: here, or at
	// the end of a relayed stream.
	streaming := false
	defer func() {
		if !streaming {
			release()
		}
	}()
	h := &ctx.Request.Header
	call := &pipeline.Call{
		API:       codec.API(),
		Body:      body,
		Principal: principal,
		ReadsBack: true,
		Upstream: func(cctx context.Context, body []byte) (int, []byte, error) {
			return s.ownCall(cctx, ctx, prov, body)
		},
	}
	call.ReadHeaders(func(name string) string { return string(h.Peek(name)) })
	x, rep := s.p.Open(context.Background(), call, codec)
	if rep != nil {
		s.reply(ctx, x, *rep, received)
		return
	}

	// The upstream call lives as long as the run allows (its context is
	// cancelled on cancel or termination), the per-call timeout, and the
	// client.
	watch := watchHangupAfter(ctx.Conn(), hangupWatchDelay, x.Abort)
	// The run's trace context travels upstream as traceparent (copied
	// with the agent's headers); a no-op when tracing is off.
	x.Forward(h.Set)
	t := x.Turn()
	up := s.fastFor(prov)
	if t.ReadBackOffered() {
		watch.Stop()
		s.readBackRounds(ctx, x, prov, up, received)
		return
	}
	if up != nil && !t.Req.Stream {
		s.relayBuffered(ctx, x, prov, up, received)
		watch.Stop()
		return
	}
	ans, err := s.sendOpen(ctx, t, prov, up)
	if err != nil {
		watch.Stop()
		s.reply(ctx, x, x.Finish(nil, err), received)
		return
	}
	if !x.Respond(ans.status, ans.eventStream) {
		body, rerr := readBounded(ans.body, s.o.Limits.MaxResponseBytes)
		ans.body.Close()
		watch.Stop()
		s.writeWhole(ctx, x, x.Finish(body, rerr), ans, body, received)
		return
	}

	// A stream: headers now, then every chunk as it arrives. Its overhead
	// header covers the gateway's time up to the upstream's headers.
	ans.copyHeaders(&ctx.Response.Header)
	x.Headers(ctx.Response.Header.Set)
	setOverhead(ctx, received, x.Waited())
	ctx.SetStatusCode(ans.status)
	streaming = true
	ctx.Response.SetBodyStream(&streamBody{
		up: ans.body, t: x, buf: chunkPool.Get().(*[]byte),
		settle: func(err error) pipeline.Reply {
			if s, ok := ans.body.(interface{ Settled() }); ok {
				s.Settled() // the settlement cancels the turn: not the relay's last bytes
			}
			return x.Finish(nil, err)
		},
		done: func() {
			ans.free()
			watch.Stop()
			release()
		},
	}, -1)
}

// answer is an upstream's answer to a call that asked for a stream, with
// its body open: from the provider's fasthttp client, or from net/http
// (a caller's own client, an upstream fasthttp cannot dial).
type answer struct {
	status      int
	eventStream bool
	body        io.ReadCloser
	// copyHeaders adds the relayed headers to the client's answer; free
	// releases what holds them, once the body is closed.
	copyHeaders func(*fasthttp.ResponseHeader)
	free        func()
}

// writeWhole answers the client with the upstream's whole answer, its
// headers relayed, or with the pipeline's replacement (rep.Answer). body
// must not alias ans, which it frees.
func (s *Server) writeWhole(ctx *fasthttp.RequestCtx, x *pipeline.Exchange, rep pipeline.Reply, ans answer, body []byte, received time.Time) {
	if rep.Answer == nil {
		ans.copyHeaders(&ctx.Response.Header)
	}
	ans.free()
	if !s.reply(ctx, x, rep, received) {
		ctx.SetStatusCode(ans.status)
		ctx.SetBody(body)
	}
}

// reply sets what the gateway adds to the client's answer (the reply's
// headers, the overhead) and writes the pipeline's replacement answer when
// there is one; it reports whether there was.
func (s *Server) reply(ctx *fasthttp.RequestCtx, x *pipeline.Exchange, rep pipeline.Reply, received time.Time) bool {
	rep.Headers(ctx.Response.Header.Set)
	setOverhead(ctx, received, x.Waited())
	if a := rep.Answer; a != nil {
		ctx.SetStatusCode(a.Status)
		ctx.SetBody(a.Body)
		return true
	}
	return false
}

// sendOpen forwards the turn's body and returns the answer with its body
// open: with the provider's fasthttp client for streams when it has one.
func (s *Server) sendOpen(ctx *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider, up *fastUpstream) (answer, error) {
	if up != nil {
		return s.sendStream(t.Ctx, ctx, t, prov, up)
	}
	return s.send(t.Ctx, ctx, t, prov)
}

// relayBuffered forwards a call that asked for no stream and answers with
// the upstream's whole response (or the pipeline's replacement).
func (s *Server) relayBuffered(ctx *fasthttp.RequestCtx, x *pipeline.Exchange, prov *config.Provider, up *fastUpstream, received time.Time) {
	t := x.Turn()
	resp, err := s.sendBuffered(t.Ctx, ctx, t, prov, up)
	if err != nil {
		s.reply(ctx, x, x.Finish(nil, err), received)
		return
	}
	defer fasthttp.ReleaseResponse(resp)
	x.Respond(resp.StatusCode(), false)
	rep := x.Finish(resp.Body(), nil)
	if rep.Answer == nil {
		addRelayed(&ctx.Response.Header, &resp.Header)
	}
	if !s.reply(ctx, x, rep, received) {
		ctx.SetStatusCode(resp.StatusCode())
		ctx.SetBody(resp.Body())
	}
}

// streamBody is a streamed answer as fasthttp's server reads it: each
// piece takes what the upstream sent, through the tap, in the server's own
// goroutine, and the server writes and flushes it as one chunk (WriteTo;
// through Read, fasthttp's 4 KB copy buffer cut a burst into chunks of
// 4 KB, two writes each). (SetBodyStreamWriter would add a goroutine and a
// pipe to every stream.)
// When the tap reads the stream's terminal event, or the upstream ends
// without one, the call is settled before those bytes go out: the agent's
// next request must find the run up to date. A read is cut (see cut) so that neither the settlement nor
// the reading of a burst holds back a chunk. The server calls Close once
// the stream ended or the client went away. A stream the upstream cut
// (Reply.Cut) ends with the provider's error event, when the bytes sent
// end an event, and without the clean end of the chunked encoding: both
// make the official SDKs raise an error.
type streamBody struct {
	up io.ReadCloser
	t  streamTurn
	// settle finishes the call (Exchange.Finish, once: later calls give
	// an empty reply) with the upstream's error, if any.
	settle  func(err error) pipeline.Reply
	done    func() // stops the hang-up watch, frees the request body
	buf     *[]byte
	pending []byte // forwarded bytes not yet read by the server
	tail    []byte // the tap's held bytes at the upstream's end
	// unfed is the rest of a read that was cut (in buf), with that read's
	// error: fed once the bytes before it went out.
	unfed    []byte
	unfedErr error
	started  bool    // the stream's first bytes were read (and cut after its first event)
	ended    bool    // the upstream ended (EOF or error)
	err      error   // the upstream's error, when not EOF
	broken   bool    // the upstream ended before the stream's terminal event
	last     [4]byte // the last bytes sent, to tell whether they end an event
}

// streamTurn is what a relayed stream needs of its exchange
// (*pipeline.Exchange) besides its settlement.
type streamTurn interface {
	Feed(chunk []byte) (out []byte, done bool)
	Terminal(event []byte) bool
	End() []byte
	CutEvent() []byte
}

func (b *streamBody) Read(p []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.ended {
			return 0, b.endErr()
		}
		b.pending = b.feed()
	}
	n := copy(p, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// SupportsBodyWriteTo tells fasthttp's server to frame each Write of
// WriteTo as a chunk (fasthttp.BodyWriterTo).
func (b *streamBody) SupportsBodyWriteTo() bool { return true }

// WriteTo writes each piece Read would return, whole, to w; w flushes
// each as a chunk.
func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		for len(b.pending) == 0 {
			if b.ended {
				if b.broken {
					return total, pipeline.ErrStreamCut
				}
				return total, nil
			}
			b.pending = b.feed()
		}
		n, err := w.Write(b.pending)
		total += int64(n)
		b.pending = b.pending[n:]
		if err != nil {
			return total, err
		}
	}
}

// feed reads the upstream once (or takes the terminal event held from the
// last read) and returns what goes to the client.
func (b *streamBody) feed() []byte {
	chunk, err := b.unfed, b.unfedErr
	b.unfed, b.unfedErr = nil, nil
	if chunk == nil {
		n, rerr := b.up.Read(*b.buf)
		chunk, err = (*b.buf)[:n], rerr
	}
	if i := b.cut(chunk); i > 0 {
		chunk, b.unfed, b.unfedErr, err = chunk[:i], chunk[i:], err, nil
	}
	var fwd []byte
	if len(chunk) > 0 {
		var done bool
		fwd, done = b.t.Feed(chunk)
		// A held tool call goes out judged: as it came, or replaced.
		if done {
			if rep := b.settle(nil); rep.Tail != nil {
				fwd = rep.Tail
			}
		}
	}
	if err != nil {
		if !errors.Is(err, io.EOF) {
			b.err = err
		}
		b.ended = true
		// fwd may alias the tap's buffer, which End reuses.
		b.tail = append(append(b.tail[:0], fwd...), b.t.End()...)
		// Settled here unless at the terminal event: a tool call held
		// when the upstream ended before it is judged before anything of
		// it goes out.
		rep := b.settle(b.err)
		b.tail = append(b.tail, rep.Tail...)
		b.sent(b.tail)
		if b.broken = rep.Cut; b.broken && b.atEventEnd() {
			b.tail = append(b.tail, b.t.CutEvent()...)
		}
		return b.tail
	}
	b.sent(fwd)
	return fwd
}

// endErr is what Read returns once the stream is relayed: an error other
// than io.EOF keeps fasthttp from writing the chunked encoding's last
// chunk. pipeline.ErrStreamCut wraps io.ErrUnexpectedEOF, which fasthttp
// does not log as a fault of its own.
func (b *streamBody) endErr() error {
	if b.broken {
		return pipeline.ErrStreamCut
	}
	return io.EOF
}

// sent notes the last bytes of p, which go to the client.
func (b *streamBody) sent(p []byte) {
	if len(p) >= len(b.last) {
		copy(b.last[:], p[len(p)-len(b.last):])
		return
	}
	copy(b.last[:], b.last[len(p):])
	copy(b.last[len(b.last)-len(p):], p)
}

// atEventEnd reports whether the bytes sent so far end an SSE event (or
// none were sent): an event added there is read as one of its own, where
// after a partial one it would be read as that one's rest.
func (b *streamBody) atEventEnd() bool {
	l := b.last
	return l == [4]byte{} || (l[2] == '\n' && l[3] == '\n') || (l[2] == '\r' && l[3] == '\r') || l == [4]byte{'\r', '\n', '\r', '\n'}
}

// cut returns where to split a read so that its first part goes out
// before the rest is read through the tap, or 0: after the stream's first
// event, whose bytes then reach the client without waiting for the burst
// behind it (a fast upstream's whole answer often arrives in one read),
// and before the stream's terminal event, which waits for the settlement.
// Each costs one more write, once per stream.
func (b *streamBody) cut(chunk []byte) int {
	if !b.started && len(chunk) > 0 {
		b.started = true
		if i := sse.FirstEventEnd(chunk); i > 0 && i < len(chunk) {
			return i
		}
	}
	if i := sse.LastEventStart(chunk); i > 0 && b.t.Terminal(chunk[i:]) {
		return i
	}
	return 0
}

func (b *streamBody) Close() error {
	// A client gone mid-stream: keep reading usage on the side until the
	// upstream ends or is cut (the hang-up watch cancels it).
	for !b.ended {
		b.feed()
	}
	b.up.Close()
	chunkPool.Put(b.buf)
	b.done()
	return nil
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// HeaderOverhead is the gateway's own time on a call, in milliseconds: from
// the request's arrival to its answer's headers, minus the wait on the
// upstream. The same figure feeds haltline_gateway_overhead_seconds.
const HeaderOverhead = "X-Haltline-Overhead-Ms"

func setOverhead(ctx *fasthttp.RequestCtx, received time.Time, upstream time.Duration) {
	d := max(time.Since(received)-upstream, 0)
	ctx.Response.Header.Set(HeaderOverhead, strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64))
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}

func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errResponseTooLarge
	}
	return b, nil
}

var errResponseTooLarge = errors.New("upstream response exceeds the gateway's limit")

// hopHeaders are not forwarded in either direction (RFC 9110 §7.6.1), nor
// the ones the gateway recomputes.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, "Content-Encoding": true,
}

// notRelayed reports whether a header stays on its side of the gateway:
// hop-by-hop, recomputed, or one of the run headers.
func notRelayed(k string) bool { return hopHeaders[k] || pipeline.HasRunPrefix(k) }

// addRelayed adds an upstream answer's headers to the client's, but those
// that stay on the upstream's side (notRelayed).
func addRelayed(dst, src *fasthttp.ResponseHeader) {
	for k, v := range src.All() {
		if !notRelayed(string(k)) {
			dst.AddBytesKV(k, v)
		}
	}
}

func copyHeaders(dst *fasthttp.ResponseHeader, src http.Header) {
	for k, vs := range src {
		if notRelayed(k) {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// ownCall sends a request of the gateway's own (a summary) to the provider
// of the call being handled, on the same path and with the same
// credentials, bounded in time and size. It runs inside the handler, while
// the caller's headers are valid.
func (s *Server) ownCall(ctx context.Context, in *fasthttp.RequestCtx, prov *config.Provider, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, min(s.o.Limits.UpstreamTimeout, 2*time.Minute))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, prov.BaseURL+string(in.Path()), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	upstreamHeaders(&in.Request.Header, prov, s.isAnthropic(prov), addHTTPHeader(req.Header))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := readBounded(resp.Body, s.o.Limits.MaxResponseBytes)
	return resp.StatusCode, b, err
}
