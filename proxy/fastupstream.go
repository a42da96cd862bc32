package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// fastUpstream is a provider's client: fasthttp writes the request and
// reads the answer in the handler's own goroutine, where net/http hands
// each call to two more. fasthttp knows no context, so the transport below
// ties each attempt to its call's context itself: a cancelled run or a
// client hang-up cuts the upstream connection at once, as net/http would.
type fastUpstream struct {
	hc *fasthttp.HostClient // calls answered whole
	// streams serves calls that asked for a stream: each holds its
	// connection for the stream's life, so it has a pool of its own, larger,
	// that long streams cannot take from the calls answered whole.
	streams *fasthttp.HostClient
}

// newFastUpstream builds the client of the provider at baseURL; nil when
// the URL is not plain http(s) to one host (net/http serves it then).
func newFastUpstream(baseURL string, maxResponse int64) *fastUpstream {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil
	}
	return &fastUpstream{hc: newHostClient(u, maxUpstreamConns, maxResponse), streams: newHostClient(u, maxUpstreamStreams, maxResponse)}
}

func newHostClient(u *url.URL, maxConns int, maxResponse int64) *fasthttp.HostClient {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	return &fasthttp.HostClient{
		Addr:      addr,
		IsTLS:     u.Scheme == "https",
		TLSConfig: &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12},
		Transport: ctxTransport{},
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}).Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return &upstreamConn{Conn: c, raw: newRawIO(c)}, nil
		},
		// Past this many connections to the provider, a call waits for one
		// to come back (in order) instead of dialing: a burst of thousands
		// of calls must not become thousands of connects, which a loaded
		// provider's accept queue drops.
		MaxConns:           maxConns,
		MaxConnWaitTimeout: 10 * time.Minute, // within the call's own deadline
		// The connection used last goes out first, as from net/http's
		// pool: the provider serves a few warm connections, not every
		// pooled one in turn (FIFO, fasthttp's default, cost the harness's
		// mock a third more CPU a call, and the gateway some too), and the
		// ones left idle are the ones MaxIdleConnDuration closes.
		ConnPoolStrategy: fasthttp.LIFO,
		// Shorter than the providers' keep-alive, so that a pooled
		// connection is rarely one the far end already closed.
		MaxIdleConnDuration:           30 * time.Second,
		MaxResponseBodySize:           int(maxResponse),
		ReadBufferSize:                16 << 10, // the providers' answer headers fit
		WriteBufferSize:               upstreamWriteBuffer,
		NoDefaultUserAgentHeader:      true,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		// Only a connection found dead before it answered is tried again
		// here; every other retry is the gateway's (withRetries).
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			return false, attempts < 3 && errors.Is(err, errStaleConn)
		},
	}
}

// do sends req and reads the whole answer into resp, within ctx and the
// deadline (zero: none).
func (f *fastUpstream) do(ctx context.Context, deadline time.Time, req *fasthttp.Request, resp *fasthttp.Response) error {
	_, err := f.send(f.hc, &call{ctx: ctx, deadline: deadline}, req, resp)
	return err
}

// doStream sends req and reads the answer's headers into resp; its body is
// read from the returned stream, which holds the connection (and keeps ctx
// and the deadline bounding it) until it is closed. The caller closes it
// before it releases or reuses resp.
func (f *fastUpstream) doStream(ctx context.Context, deadline time.Time, req *fasthttp.Request, resp *fasthttp.Response) (*fastStream, error) {
	resp.StreamBody = true
	return f.send(f.streams, &call{ctx: ctx, deadline: deadline, stream: true}, req, resp)
}

func (f *fastUpstream) send(hc *fasthttp.HostClient, c *call, req *fasthttp.Request, resp *fasthttp.Response) (*fastStream, error) {
	ctx, deadline := c.ctx, c.deadline
	req.SetUserValue(callKey{}, c)
	err := hc.Do(req, resp)
	if err == nil {
		return c.body, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err() // cancelled: say so as net/http would
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return nil, context.DeadlineExceeded // as net/http says of a timed out call
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// A connect that timed out is not the call's timeout (a dial
		// error says it is): worth another try.
		return nil, dialError{err}
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return nil, errResponseTooLarge
	}
	return nil, err
}

// maxUpstreamConns bounds the connections to one provider for calls
// answered whole; maxUpstreamStreams those of streams, each held for a
// stream's life (net/http, which served streams before, had no bound).
const (
	maxUpstreamConns   = 1024
	maxUpstreamStreams = 16384
)

// call is what the transport needs of the call an attempt belongs to, and
// what it hands back of a streamed answer.
type call struct {
	ctx      context.Context
	deadline time.Time
	stream   bool        // the body is left to be read (resp.StreamBody)
	body     *fastStream // the streamed body of the attempt
}

type callKey struct{}

// ctxTransport is fasthttp's round trip with the call's context and
// deadline: the deadline bounds the connection's reads and writes, and a
// cancellation sets a past one, which fails the blocked read or write at
// once.
type ctxTransport struct{}

var errStaleConn = errors.New("upstream closed a pooled connection")

func (ctxTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	c, _ := req.UserValue(callKey{}).(*call)
	if c == nil {
		c = &call{ctx: context.Background()}
	}
	ctx, deadline := c.ctx, c.deadline
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var wait time.Duration
	if !deadline.IsZero() {
		wait = time.Until(deadline)
	}
	cc, err := hc.AcquireConn(wait, false)
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	reused := markUsed(conn)
	if err := conn.SetDeadline(deadline); err != nil {
		hc.CloseConn(cc)
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })

	bw := hc.AcquireWriter(conn)
	err = writeRequest(conn, req, bw)
	hc.ReleaseWriter(bw)
	wrote := err == nil
	if err == nil {
		br := hc.AcquireReader(conn)
		err = resp.ReadLimitBody(br, hc.MaxResponseBodySize)
		if err == nil && c.stream && resp.BodyStream() != nil {
			// The body is read by the caller: the connection, its reader
			// and the watch on ctx stay with it until it is closed.
			c.body = &fastStream{r: resp.BodyStream(), br: br, resp: resp, stop: stop, watching: true,
				release: func(reuse bool) {
					if reuse {
						hc.ReleaseConn(cc)
					} else {
						hc.CloseConn(cc)
					}
				}, freeReader: hc.ReleaseReader}
			return false, nil
		}
		hc.ReleaseReader(br)
	}
	interrupted := !stop()
	if err != nil || interrupted || resp.ConnectionClose() {
		hc.CloseConn(cc)
	} else {
		hc.ReleaseConn(cc)
	}
	if err != nil && reused && !interrupted && ctx.Err() == nil && deadFromStart(err, wrote) {
		return true, fmt.Errorf("%w: %w", errStaleConn, err)
	}
	return false, err
}

// deadFromStart reports an error of a connection that failed before any
// byte of an answer (fasthttp reports any failure of the first read as
// io.EOF): the far end had closed it while it sat in the pool.
func deadFromStart(err error, wrote bool) bool {
	return !wrote || err == io.EOF
}

// upstreamWriteBuffer is the size of the buffered writer a request is
// written through: the headers and a small body go out in one write.
const upstreamWriteBuffer = 16 << 10

// writeRequest writes req to conn through bw, its buffered writer, in one
// system call when conn is a plain TCP one (an upstreamConn with rawIO):
// a body larger than the buffer went out in two writes, the buffer's
// first 16 KB then the rest (bufio's large-write path), and each woke the
// provider's reader, which on a shared core also meant a switch to it and
// back. The pieces bw hands over while the request is written are held
// (gather) and go out with the last one in one writev: the headers (and
// the body's head) in bw's buffer, copied, and the body's bytes as they
// are. A streamed body is written piece by piece, nothing held: its pieces
// come through a copy buffer of fasthttp's, and as many as the body is
// long.
func writeRequest(conn net.Conn, req *fasthttp.Request, bw *bufio.Writer) error {
	uc, _ := conn.(*upstreamConn) // not under TLS: its records are its own buffer's
	if uc == nil || uc.raw == nil || req.IsBodyStream() {
		if err := req.Write(bw); err != nil {
			return err
		}
		return bw.Flush()
	}
	uc.gathering, uc.heldAbove = true, bw.Size()
	err := req.Write(bw)
	uc.gathering = false
	if err == nil {
		err = bw.Flush() // the last piece takes the held ones with it
	}
	if err == nil && len(uc.held) > 0 {
		_, err = uc.writeHeld(nil) // the body ended on the buffer's edge
	}
	uc.dropHeld()
	return err
}

// upstreamConn counts the calls a pooled connection carried; its reads
// and writes are raw system calls (rawIO) when it is a TCP connection.
type upstreamConn struct {
	net.Conn
	raw  *rawIO
	used bool

	// While a request is written (writeRequest), its pieces are held.
	// One no longer than the writer's buffer (heldAbove) is the buffer
	// itself, reused as soon as Write returns: held as a copy, in copied.
	// A longer one is the request's body (bufio writes those directly),
	// which stays as it is until the request is written: held as it is.
	gathering bool
	heldAbove int
	held      [][]byte
	copied    *[]byte // from heldCopies
}

var heldCopies = sync.Pool{New: func() any { b := make([]byte, 0, upstreamWriteBuffer); return &b }}

func (c *upstreamConn) Read(p []byte) (int, error) {
	if c.raw != nil {
		return c.raw.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *upstreamConn) Write(p []byte) (int, error) {
	switch {
	case c.raw == nil:
		return c.Conn.Write(p)
	case c.gathering:
		c.hold(p)
		return len(p), nil
	case len(c.held) > 0:
		return c.writeHeld(p)
	}
	return c.raw.Write(p)
}

func (c *upstreamConn) hold(p []byte) {
	if len(p) > c.heldAbove {
		c.held = append(c.held, p)
		return
	}
	if c.copied == nil {
		c.copied = heldCopies.Get().(*[]byte)
	}
	start := len(*c.copied)
	*c.copied = append(*c.copied, p...)
	c.held = append(c.held, (*c.copied)[start:])
}

// writeHeld writes the held pieces, then p, in one writev.
func (c *upstreamConn) writeHeld(p []byte) (int, error) {
	bufs := c.held
	if len(p) > 0 {
		bufs = append(bufs, p)
	}
	_, err := c.raw.Writev(bufs)
	c.dropHeld()
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// dropHeld forgets the held pieces (a pooled connection must not keep a
// request's body alive) and returns the copies' buffer.
func (c *upstreamConn) dropHeld() {
	clear(c.held[:cap(c.held)]) // writeHeld's last piece too
	c.held = c.held[:0]
	if c.copied != nil {
		*c.copied = (*c.copied)[:0]
		heldCopies.Put(c.copied)
		c.copied = nil
	}
}

// markUsed marks conn as carrying a call and reports whether it carried one
// before.
func markUsed(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	uc, ok := conn.(*upstreamConn)
	if !ok {
		return false
	}
	was := uc.used
	uc.used = true
	return was
}

// dialError is a failed connect, hiding what it wraps from errors.Is: a
// timed out dial matches context.DeadlineExceeded, which would end the
// call instead of retrying it.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }

// fastStream is a streamed answer's body, read from its connection. A Read
// takes every whole HTTP chunk already received (fasthttp's own reader
// returns one chunk per Read: an event per write to the client), and never
// waits for more once it has bytes. Close hands the connection back to the
// pool when the body was read to its end, and closes it otherwise.
type fastStream struct {
	r          io.Reader
	br         *bufio.Reader
	resp       *fasthttp.Response
	stop       func() bool // ends the watch on the call's context
	release    func(reuse bool)
	freeReader func(*bufio.Reader)
	watching   bool // the watch is on
	cut        bool // the watch fired: the connection's deadline is past
	eof        bool
	closed     bool
}

// Settled ends the watch on the call's context: its settlement cancels
// it, and the rest of the answer (the stream's last bytes) is still read,
// bounded by the deadline, and the connection kept.
func (s *fastStream) Settled() {
	if s.watching {
		s.watching = false
		s.cut = !s.stop()
	}
}

func (s *fastStream) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	// More only when it cannot block (see chunkReady).
	for err == nil && n < len(p) && s.br.Buffered() > 0 {
		if head, _ := s.br.Peek(s.br.Buffered()); !chunkReady(head) {
			break
		}
		var m int
		m, err = s.r.Read(p[n:])
		n += m
	}
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

// chunkReady reports whether the buffered bytes head let the body's reader
// go on without waiting for the network: inside a chunk any byte does; at
// a chunk boundary, the size line must be whole, and for the last chunk
// (size 0) the blank line that ends its trailer too. A false answer is
// only ever one read more.
func chunkReady(head []byte) bool {
	i := bytes.IndexByte(head, '\n')
	if i < 0 {
		return false
	}
	if size := bytes.TrimLeft(head[:i], "0"); len(size) > 0 && size[0] != '\r' && size[0] != ';' {
		return true // not a zero size line (or not a size line at all)
	}
	return bytes.Contains(head[i:], []byte("\n\r\n"))
}

func (s *fastStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.Settled()
	// A connection is reused only after a body read to its framed end (an
	// unframed one ends with the connection), and never once the watch set
	// its deadline: it may still be doing so.
	reuse := s.eof && !s.cut && !s.resp.ConnectionClose() && s.resp.Header.ContentLength() != -2
	_ = s.resp.CloseBodyStream()
	s.freeReader(s.br)
	s.release(reuse)
	return nil
}
