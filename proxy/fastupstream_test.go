package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func fastRequest(url string, body string) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(http.MethodPost)
	req.SetRequestURI(url)
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	return req
}

// A pooled connection the upstream closed while it was idle is replaced
// without the call seeing an error.
func TestFastUpstreamReplacesAClosedPooledConnection(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	up := newFastUpstream(srv.URL, 1<<20)
	for i, body := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		if i > 0 {
			srv.CloseClientConnections() // the far end drops the pooled connection
			time.Sleep(20 * time.Millisecond)
		}
		req := fastRequest(srv.URL+"/v1/chat/completions", body)
		resp := fasthttp.AcquireResponse()
		if err := up.do(context.Background(), time.Time{}, req, resp); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if resp.StatusCode() != 200 || string(resp.Body()) != body {
			t.Fatalf("call %d: %d %s", i+1, resp.StatusCode(), resp.Body())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("upstream saw %d calls, want 3", n)
	}
}

// Cancelling the call's context cuts the upstream connection while the
// gateway waits for the answer's headers; a deadline ends it as a timeout.
func TestFastUpstreamHonoursTheCallContext(t *testing.T) {
	seen := make(chan struct{}, 4)
	gone := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http watches for a hang-up once the body is read
		seen <- struct{}{}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	up := newFastUpstream(srv.URL, 1<<20)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-seen; cancel() }()
	req := fastRequest(srv.URL+"/v1/chat/completions", `{}`)
	resp := fasthttp.AcquireResponse()
	if err := up.do(ctx, time.Time{}, req, resp); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request outlived its cancelled call")
	}

	if err := up.do(context.Background(), time.Now().Add(100*time.Millisecond), req, resp); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed out call: %v", err)
	}
	<-seen
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request outlived its timed out call")
	}
}

// An answer over the limit is refused, not truncated.
func TestFastUpstreamBoundsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 4096))
	}))
	defer srv.Close()
	up := newFastUpstream(srv.URL, 1024)
	req := fastRequest(srv.URL+"/v1/chat/completions", `{}`)
	resp := fasthttp.AcquireResponse()
	if err := up.do(context.Background(), time.Time{}, req, resp); !errors.Is(err, errResponseTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestNewFastUpstreamRefusesWhatItCannotDial(t *testing.T) {
	for _, u := range []string{"unix:///tmp/x", "http://user:pw@host", "://", "https://"} {
		if newFastUpstream(u, 1) != nil {
			t.Errorf("%q: got a client", u)
		}
	}
	if up := newFastUpstream("https://api.openai.com", 1); up == nil || up.hc.Addr != "api.openai.com:443" || !up.hc.IsTLS {
		t.Errorf("https default port: %+v", up)
	}
}

// Calls beyond the connection limit wait for a pooled connection instead of
// dialing one each, and all get their answer.
func TestFastUpstreamWaitsForAConnection(t *testing.T) {
	var conns, inFlight, most atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	up := newFastUpstream(srv.URL, 1<<20)
	up.hc.MaxConns = 2
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			req := fastRequest(srv.URL+"/v1/chat/completions", `{}`)
			resp := fasthttp.AcquireResponse()
			errs <- up.do(context.Background(), time.Now().Add(10*time.Second), req, resp)
		}()
	}
	for inFlight.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the other three are waiting, not dialing
	close(release)
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if c, m := conns.Load(), most.Load(); c != 2 || m != 2 {
		t.Fatalf("%d connections, %d calls at once at the upstream; want 2 and 2", c, m)
	}
}

// A failed connect is worth another try: it must not read as the call's
// own timeout.
func TestFastUpstreamDialFailureIsRetryable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	up := newFastUpstream("http://"+addr, 1<<20)
	req := fastRequest("http://"+addr+"/v1/chat/completions", `{}`)
	resp := fasthttp.AcquireResponse()
	err = up.do(context.Background(), time.Now().Add(10*time.Second), req, resp)
	var de dialError
	if !errors.As(err, &de) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %T %v", err, err)
	}
	if retry, _ := retryable(0, nil, err); !retry {
		t.Fatal("a failed connect is not retried")
	}
}

// Providers are https: the client speaks TLS (with the host's name) and
// still replaces a pooled connection the far end closed.
func TestFastUpstreamOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	up := newFastUpstream(srv.URL, 1<<20)
	if up == nil || !up.hc.IsTLS {
		t.Fatalf("no TLS client for %s", srv.URL)
	}
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	up.hc.TLSConfig.RootCAs = roots
	up.hc.TLSConfig.ServerName = "example.com" // the test certificate's name
	for i, body := range []string{`{"n":1}`, `{"n":2}`} {
		if i > 0 {
			srv.CloseClientConnections()
			time.Sleep(20 * time.Millisecond)
		}
		req := fastRequest(srv.URL+"/v1/messages", body)
		resp := fasthttp.AcquireResponse()
		if err := up.do(context.Background(), time.Now().Add(5*time.Second), req, resp); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if string(resp.Body()) != body {
			t.Fatalf("call %d: %s", i+1, resp.Body())
		}
	}
}
