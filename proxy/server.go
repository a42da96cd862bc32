package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
)

// Options configure the data plane.
type Options struct {
	Pipeline    *pipeline.Pipeline
	OpenAI      config.Provider
	Anthropic   config.Provider
	VirtualKeys map[string]config.Principal
	Limits      config.Limits
	Logger      *slog.Logger
	// Client is the upstream client; nil builds one tuned for many
	// concurrent calls to few hosts.
	Client *http.Client
	// Retries bounds upstream retries of timeouts, 5xx, resets and 429.
	Retries int
	// MCPServers and Tools are the tool routes' upstreams (proxy/tools.go).
	MCPServers map[string]config.MCPServer
	Tools      map[string]config.HTTPTool
}

// Server is the data plane.
type Server struct {
	o      Options
	p      *pipeline.Pipeline
	client *http.Client
	log    *slog.Logger
	srv    *fasthttp.Server
	creds  pipeline.Credentials
	// fastOpenAI and fastAnthropic carry the model calls, streamed or not;
	// nil when the client is the caller's own (Options.Client) or the base
	// URL is not one fasthttp can dial (client then serves them).
	fastOpenAI, fastAnthropic *fastUpstream
	// bodies bounds the model calls' request bodies held at once; nil
	// when Limits.MaxBodyBytesInFlight is 0 (no bound).
	bodies *bodyBudget
	// ln is the listener Serve accepts on; nil before.
	ln atomic.Pointer[listener]
}

var (
	codecChat      wire.Codec = openai.Chat{}
	codecResponses wire.Codec = openai.Responses{}
	codecMessages  wire.Codec = anthropic.Messages{}
)

// New builds the data plane.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	own := o.Client == nil
	if own {
		o.Client = &http.Client{Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   512,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 0, // bounded per call by the context
			ForceAttemptHTTP2:     true,
		}}
	}
	if o.Retries == 0 {
		o.Retries = 2
	}
	s := &Server{o: o, p: o.Pipeline, client: o.Client, log: o.Logger, creds: Credentials(o.VirtualKeys)}
	if o.Limits.MaxBodyBytesInFlight > 0 {
		s.bodies = newBodyBudget(o.Limits.MaxBodyBytesInFlight)
	}
	if own {
		s.fastOpenAI = newFastUpstream(o.OpenAI.BaseURL, o.Limits.MaxResponseBytes)
		s.fastAnthropic = newFastUpstream(o.Anthropic.BaseURL, o.Limits.MaxResponseBytes)
	}
	s.srv = &fasthttp.Server{
		Handler:            s.Handle,
		ErrorHandler:       s.handleError,
		ExpectHandler:      s.expect,
		MaxRequestBodySize: int(o.Limits.MaxBodyBytes),
		// Bodies are read by the handler (readBody), so an oversized one is
		// refused in the caller's provider format, chunked or not: fasthttp
		// itself would reset the request and lose which API it was for.
		StreamRequestBody: true,
		// A multipart body is forwarded as it came (pass-through); parsed
		// ahead of the handler it would be spooled to disk first.
		DisablePreParseMultipartForm: true,
		// fasthttp's ReadTimeout runs from a connection's opening (its
		// first request) or a request's first byte to the end of its
		// body; headerReceived restarts it for the body at the end of
		// the headers, which makes it the headers' own timeout.
		ReadTimeout:    o.Limits.HeaderTimeout,
		HeaderReceived: s.headerReceived,
		WriteTimeout:   0, // never cut a long stream
		IdleTimeout:    o.Limits.IdleTimeout,
		// The listener refuses connections past Limits.MaxConnections
		// itself; fasthttp's own bound must not be the lower one.
		Concurrency:           max(o.Limits.MaxConnections, fasthttp.DefaultConcurrency),
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		ReduceMemoryUsage:     false,
		CloseOnShutdown:       true,
		Name:                  "haltline",

		// A streamed burst goes out as one chunk (streamBody.WriteTo),
		// in one write when it fits: at fasthttp's default of 4 KB a
		// 12 KB burst took three writes. An answer whose headers and
		// body pass the buffer takes two writes (fasthttp's single
		// writev is only for *net.TCPConn, which rawConn is not).
		// Pooled per request in progress, not per connection.
		WriteBufferSize: 16 << 10,
	}
	return s
}

// fastFor is the provider's fasthttp client for model calls, or nil.
func (s *Server) fastFor(prov *config.Provider) *fastUpstream {
	if s.isAnthropic(prov) {
		return s.fastAnthropic
	}
	return s.fastOpenAI
}

// Serve accepts connections on ln until Shutdown, within the bounds on
// connections, retrying failed accepts (listener); TCP connections read
// and write with raw system calls (rawConn).
func (s *Server) Serve(ln net.Listener) error {
	l := newListener(ln, s.log, s.o.Limits.MaxConnections, s.o.Limits.MaxConnectionsPerIP)
	if fds := openFileLimit(); fds > 0 && uint64(l.max) > fds/2 {
		// Each call in flight holds an upstream connection besides its
		// client's.
		s.log.Warn("limits.max_connections is more than half the open-file limit: "+
			"at full load, accepting may fail until descriptors are free (retried; /readyz says so)",
			"max_connections", l.max, "fd_limit", fds)
	}
	s.ln.Store(l)
	return s.srv.Serve(l)
}

// Ready is nil while the data plane accepts connections, or says why it
// does not (out of descriptors, at limits.max_connections): /readyz.
func (s *Server) Ready() error {
	if l := s.ln.Load(); l != nil {
		return l.ready()
	}
	return nil
}

// headerReceived gives a request's body its own read timeout, counted from
// the end of its headers (fasthttp.Server.ReadTimeout).
func (s *Server) headerReceived(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return fasthttp.RequestConfig{ReadTimeout: s.o.Limits.BodyTimeout}
}

// expect answers a request announcing a body over the limit with
// Expect: 100-continue, before the client sends it.
func (s *Server) expect(ctx *fasthttp.RequestCtx) int {
	if n := ctx.Request.Header.ContentLength(); n > 0 && int64(n) > s.o.Limits.MaxBodyBytes {
		tooLarge(ctx, codecFor(string(ctx.Path()), ctx.Request.Header.Peek("anthropic-version") != nil))
		return fasthttp.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusContinue
}

// Shutdown stops accepting and waits for calls in flight (streams included)
// until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }

// Handle serves one request; a refusal's unread body is read and dropped
// before it is sent (drain).
func (s *Server) Handle(ctx *fasthttp.RequestCtx) {
	s.route(ctx)
	if ctx.Response.StatusCode() >= 400 && ctx.Request.IsBodyStream() {
		s.drain(ctx)
	}
}

// route routes one request.
func (s *Server) route(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if v1 := versioned(path); v1 != path {
		// The rest of the call (codec, upstream URL) sees the provider's
		// own path.
		ctx.URI().SetPath(v1)
		path = v1
	}
	post := ctx.IsPost()
	switch {
	case post && path == "/v1/chat/completions":
		s.model(ctx, codecChat, &s.o.OpenAI)
	case post && path == "/v1/responses":
		s.model(ctx, codecResponses, &s.o.OpenAI)
	case post && path == "/v1/messages":
		s.model(ctx, codecMessages, &s.o.Anthropic)
	case strings.HasPrefix(path, "/v1/"):
		s.passThrough(ctx)
	case path == "/mcp" || strings.HasPrefix(path, "/mcp/"):
		s.mcpRoute(ctx)
	case strings.HasPrefix(path, "/tools/"):
		s.httpToolRoute(ctx)
	default:
		// In the caller's format: an Anthropic client names its API version.
		codec := codecFor(path, ctx.Request.Header.Peek("anthropic-version") != nil)
		writeAnswer(ctx, &pipeline.Answer{Status: 404, ContentType: "application/json",
			Body: codec.ErrorBody(wire.ErrNotFound, "no route for "+sanitize(path), nil)})
	}
}

// handleError renders fasthttp's own refusals (body too large, malformed
// HTTP) in the provider format the path implies.
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	codec := codecFor(string(ctx.Path()), ctx.Request.Header.Peek("anthropic-version") != nil)
	kind, status, msg := wire.ErrInvalidRequest, 400, "malformed request"
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		kind, status, msg = wire.ErrTooLarge, 413, "request body exceeds the gateway's limit"
	case isTimeout(err):
		status, msg = 408, "request headers not received within limits.header_timeout"
	case errors.As(err, &small):
		status, msg = 431, "request headers too large"
	}
	ctx.Response.Reset()
	writeAnswer(ctx, &pipeline.Answer{Status: status, ContentType: "application/json", Body: codec.ErrorBody(kind, msg, nil)})
	ctx.SetConnectionClose()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// unversioned are the provider routes some clients call without the /v1
// prefix, having put it in their base URL or not (docs/design.md §2): the model
// routes, and the model list they read before the first call.
var unversioned = []string{"/chat/completions", "/responses", "/messages", "/models"}

// versioned is path with the /v1 prefix when it names a provider route
// without it, else path unchanged.
func versioned(path string) string {
	for _, p := range unversioned {
		if path == p || strings.HasPrefix(path, p+"/") {
			return "/v1" + path
		}
	}
	return path
}

func codecFor(path string, anthropicHeader bool) wire.Codec {
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") || anthropicHeader {
		return codecMessages
	}
	if path == "/v1/responses" {
		return codecResponses
	}
	return codecChat
}

// credential resolves the agent's key (pipeline.Credentials).
func (s *Server) credential(ctx *fasthttp.RequestCtx) (pipeline.Principal, bool) {
	h := &ctx.Request.Header
	return s.creds.Resolve(pipeline.AgentKey(string(h.Peek("Authorization")), string(h.Peek("x-api-key"))))
}

func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.ToValidUTF8(s, "?")
}

func writeAnswer(ctx *fasthttp.RequestCtx, a *pipeline.Answer) {
	pipeline.AnswerHeaders(a, ctx.Response.Header.Set)
	ctx.SetStatusCode(a.Status)
	ctx.SetBody(a.Body)
}

// Credentials turns configured virtual keys into the pipeline's resolver;
// both front ends use it.
func Credentials(keys map[string]config.Principal) pipeline.Credentials {
	c := pipeline.Credentials{}
	if len(keys) > 0 {
		c.VirtualKeys = make(map[string]pipeline.Principal, len(keys))
		for k, p := range keys {
			c.VirtualKeys[k] = pipeline.Principal{Tenant: p.Tenant, Team: p.Team, User: p.User}
		}
	}
	return c
}

// readBody reads the request body up to the limit: errTooLarge when it
// is larger, or the read's error (refuseBody renders both).
func readBody(ctx *fasthttp.RequestCtx, limit int64) ([]byte, error) {
	body, _, err := readBodyInto(ctx, limit, nil)
	return body, err
}

// readPooledBody is readBody into a pooled buffer: a streamed body (one
// larger than fasthttp's read buffer, e.g. a 200 KB history) would
// otherwise be a fresh allocation per call. It also takes the body's bytes
// from the server's bodyBudget before reading it (errBusy when there was
// no room within Limits.BodyWait). release hands both back; nothing may
// hold the body, or a slice of it, afterwards.
func (s *Server) readPooledBody(ctx *fasthttp.RequestCtx, limit int64) (body []byte, release func(), err error) {
	var held int64
	if ctx.Request.IsBodyStream() {
		n := int64(ctx.Request.Header.ContentLength())
		if n > limit {
			ctx.SetConnectionClose()
			return nil, noRelease, errTooLarge
		}
		if n < 0 { // chunked: what the pooled buffer holds, corrected once read
			n = bodyPoolSize
		}
		var ok bool
		if held, ok = s.bodies.acquire(n, s.o.Limits.BodyWait); !ok {
			// The body was not read: the connection cannot be reused.
			ctx.SetConnectionClose()
			return nil, noRelease, errBusy
		}
	}
	bufp := bodyPool.Get().(*[]byte)
	body, grown, err := readBodyInto(ctx, limit, (*bufp)[:0])
	if extra := int64(len(body)) - held; grown && held > 0 && extra > 0 {
		s.bodies.take(extra)
		held += extra
	}
	switch {
	case grown:
		release = func() {
			s.bodies.release(held)
			if cap(body) <= maxPooledBody {
				*bufp = body[:0]
				bodyPool.Put(bufp)
			}
		}
	case held > 0:
		bodyPool.Put(bufp)
		release = func() { s.bodies.release(held) }
	default: // a body fasthttp read with the headers: nothing held
		bodyPool.Put(bufp)
		release = noRelease
	}
	if err != nil {
		return nil, release, err
	}
	return body, release, nil
}

func noRelease() {}

var (
	errTooLarge = errors.New("request body exceeds the gateway's limit")
	errBusy     = errors.New("too many request bodies in flight")
)

// maxPooledBody bounds the buffers kept for reuse: a rare huge body is left
// to the collector rather than pinned.
const maxPooledBody = 4 << 20

const bodyPoolSize = 64 << 10

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, bodyPoolSize); return &b }}

// readBodyInto reads the body into buf (grown as needed) when it is
// streamed; a body fasthttp already holds is returned as is (used reports
// false).
func readBodyInto(ctx *fasthttp.RequestCtx, limit int64, buf []byte) (body []byte, used bool, err error) {
	if !ctx.Request.IsBodyStream() {
		b := ctx.PostBody()
		if int64(len(b)) > limit {
			return nil, false, errTooLarge
		}
		return b, false, nil
	}
	n := ctx.Request.Header.ContentLength()
	if int64(n) > limit {
		ctx.SetConnectionClose()
		return nil, false, errTooLarge
	}
	// Room for the whole body and the MinRead that ReadFrom wants free
	// before it sees EOF: a body that filled its buffer's allocation would
	// otherwise have it allocated again, twice as large, and copied.
	b := bytes.NewBuffer(slices.Grow(buf[:0], max(n, 0)+bytes.MinRead))
	if _, err := b.ReadFrom(io.LimitReader(ctx.RequestBodyStream(), limit+1)); err != nil {
		ctx.SetConnectionClose()
		return nil, false, err
	}
	if int64(b.Len()) > limit {
		ctx.SetConnectionClose()
		return nil, false, errTooLarge
	}
	return b.Bytes(), true, nil
}

// bodyRefusal is the status, error kind and message of a body that could
// not be read whole (readBody, readPooledBody).
func bodyRefusal(err error) (status int, kind wire.ErrorKind, msg string) {
	switch {
	case err == errBusy:
		return 503, wire.ErrUnavailable, "the gateway holds too many request bodies; retry shortly"
	case err == errTooLarge:
		return 413, wire.ErrTooLarge, err.Error()
	case isTimeout(err):
		return 408, wire.ErrInvalidRequest, "request body not received within limits.body_timeout"
	}
	return 400, wire.ErrInvalidRequest, "request body could not be read"
}

// refuseBody answers a body that could not be read whole in the provider's
// format; a 503 (Anthropic's overloaded_error) carries Retry-After, which
// the official SDKs wait before they retry.
func refuseBody(ctx *fasthttp.RequestCtx, codec wire.Codec, err error) {
	status, kind, msg := bodyRefusal(err)
	if status == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	writeAnswer(ctx, &pipeline.Answer{Status: status, ContentType: "application/json", Body: codec.ErrorBody(kind, msg, nil)})
}

// drain reads and drops what a refused request's handler left unread of
// its body, up to Limits.MaxDrainBytes and within the body's read
// timeout: a connection closed with bytes unread is reset by the kernel,
// and a client still sending its body then sees the reset, not the
// refusal (and an SDK retries, sending it all again). A body announced
// larger is not read: its connection is closed at once. Nothing is held:
// the bytes go through one pooled buffer.
func (s *Server) drain(ctx *fasthttp.RequestCtx) {
	limit := s.o.Limits.MaxDrainBytes
	if n := ctx.Request.Header.ContentLength(); limit <= 0 || int64(n) > limit {
		ctx.SetConnectionClose()
		return
	}
	bufp := drainPool.Get().(*[]byte)
	defer drainPool.Put(bufp)
	r := ctx.RequestBodyStream()
	for read := int64(0); read <= limit; {
		n, err := r.Read(*bufp)
		read += int64(n)
		if err == io.EOF {
			return
		}
		if err != nil {
			break
		}
	}
	ctx.SetConnectionClose()
}

var drainPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// tooLarge answers 413 in the provider's format.
func tooLarge(ctx *fasthttp.RequestCtx, codec wire.Codec) { refuseBody(ctx, codec, errTooLarge) }
