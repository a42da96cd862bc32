package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"
)

// fastUpstream is a provider's client for calls answered whole (no stream):
// fasthttp writes the request and reads the answer in the handler's own
// goroutine, where net/http hands each call to two more. fasthttp knows
// no context, so the transport below ties each attempt to its call's
// context itself: a cancelled run or a client hang-up cuts the upstream
// connection at once, as net/http would.
type fastUpstream struct {
	hc *fasthttp.HostClient
}

// newFastUpstream builds the client of the provider at baseURL; nil when
// the URL is not plain http(s) to one host (net/http serves it then).
func newFastUpstream(baseURL string, maxResponse int64) *fastUpstream {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	hc := &fasthttp.HostClient{
		Addr:      addr,
		IsTLS:     u.Scheme == "https",
		TLSConfig: &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12},
		Transport: ctxTransport{},
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}).Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return &upstreamConn{Conn: c}, nil
		},
		// Past this many connections to the provider, a call waits for one
		// to come back (in order) instead of dialing: a burst of thousands
		// of calls must not become thousands of connects, which a loaded
		// provider's accept queue drops.
		MaxConns:           maxUpstreamConns,
		MaxConnWaitTimeout: 10 * time.Minute, // within the call's own deadline
		// Shorter than the providers' keep-alive, so that a pooled
		// connection is rarely one the far end already closed.
		MaxIdleConnDuration:           30 * time.Second,
		MaxResponseBodySize:           int(maxResponse),
		ReadBufferSize:                16 << 10, // the providers' answer headers fit
		WriteBufferSize:               16 << 10,
		NoDefaultUserAgentHeader:      true,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		// Only a connection found dead before it answered is tried again
		// here; every other retry is the gateway's (withRetries).
		RetryIfErr: func(_ *fasthttp.Request, attempts int, err error) (bool, bool) {
			return false, attempts < 3 && errors.Is(err, errStaleConn)
		},
	}
	return &fastUpstream{hc: hc}
}

// do sends req and reads the whole answer into resp, within ctx and the
// deadline (zero: none).
func (f *fastUpstream) do(ctx context.Context, deadline time.Time, req *fasthttp.Request, resp *fasthttp.Response) error {
	req.SetUserValue(callKey{}, &call{ctx: ctx, deadline: deadline})
	err := f.hc.Do(req, resp)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // cancelled: say so as net/http would
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return context.DeadlineExceeded // as net/http says of a timed out call
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// A connect that timed out is not the call's timeout (a dial
		// error says it is): worth another try.
		return dialError{err}
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return errResponseTooLarge
	}
	return err
}

// maxUpstreamConns bounds the connections to one provider for calls
// answered whole.
const maxUpstreamConns = 1024

// call is what the transport needs of the call an attempt belongs to.
type call struct {
	ctx      context.Context
	deadline time.Time
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
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	wrote := err == nil
	if err == nil {
		br := hc.AcquireReader(conn)
		err = resp.ReadLimitBody(br, hc.MaxResponseBodySize)
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

// upstreamConn counts the calls a pooled connection carried.
type upstreamConn struct {
	net.Conn
	used bool
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
