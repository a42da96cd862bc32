package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
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

// countingServer serves h and counts the connections it accepts.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// Calls beyond the connection limit wait for a pooled connection instead of
// dialing one each, and all get their answer.
func TestFastUpstreamWaitsForAConnection(t *testing.T) {
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
		_, _ = w.Write([]byte(`{}`))
	}))
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

// After a burst has opened several connections, calls one at a time go on
// the connection used last, as net/http's pool does, rather than each on
// the one idle longest: the provider keeps serving one warm connection
// instead of one goroutine and set of buffers per call in turn, which
// costs it CPU on every call.
func TestFastUpstreamReusesTheLastConnection(t *testing.T) {
	var inFlight atomic.Int32
	release := make(chan struct{})
	var held atomic.Bool
	held.Store(true)
	remotes := make(chan string, 64)
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		if held.Load() {
			<-release
		}
		remotes <- r.RemoteAddr
		_, _ = w.Write([]byte(`{}`))
	}))
	up := newFastUpstream(srv.URL, 1<<20)
	call := func() error {
		req := fastRequest(srv.URL+"/v1/chat/completions", `{}`)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		return up.do(context.Background(), time.Now().Add(10*time.Second), req, resp)
	}
	const burst = 4
	errs := make(chan error, burst)
	for range burst {
		go func() { errs <- call() }()
	}
	for inFlight.Load() < burst {
		time.Sleep(time.Millisecond)
	}
	held.Store(false)
	close(release)
	for range burst {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		<-remotes
	}
	seen := map[string]bool{}
	for range 8 {
		if err := call(); err != nil {
			t.Fatal(err)
		}
		seen[<-remotes] = true
	}
	if c := conns.Load(); c != burst {
		t.Fatalf("%d connections opened, want %d", c, burst)
	}
	if len(seen) != 1 {
		t.Fatalf("8 calls one at a time used %d connections, want 1", len(seen))
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

// A streamed answer is read event by event as the upstream flushes them: a
// Read never waits for more once it has bytes (the upstream writes the
// next event only once the client has the last). Read to its end, the
// stream gives its connection back to the pool; closed early, it closes it.
func TestFastUpstreamStreams(t *testing.T) {
	acks := make(chan struct{})
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-acks:
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Second):
				return
			}
		}
	}))
	up := newFastUpstream(srv.URL, 1<<20)
	stream := func(ctx context.Context) (*fasthttp.Response, *fastStream) {
		t.Helper()
		req := fastRequest(srv.URL+"/v1/chat/completions", `{"stream":true}`)
		defer fasthttp.ReleaseRequest(req)
		resp := fasthttp.AcquireResponse()
		body, err := up.doStream(ctx, time.Now().Add(10*time.Second), req, resp)
		if err != nil || body == nil {
			t.Fatalf("stream: %v", err)
		}
		if ct := string(resp.Header.ContentType()); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		return resp, body
	}
	buf := make([]byte, 1024)
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		resp, body := stream(ctx)
		for i := range 3 {
			n, err := body.Read(buf)
			if want := fmt.Sprintf("data: %d\n\n", i); err != nil || string(buf[:n]) != want {
				t.Fatalf("round %d read %d: %q %v, want %q", round, i, buf[:n], err, want)
			}
			if i == 2 && round == 1 {
				// Settled at its last event: the call's context ends, the
				// answer's end is still read and the connection kept.
				body.Settled()
				cancel()
			}
			acks <- struct{}{}
		}
		if n, err := body.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("after the last event: %d %v", n, err)
		}
		body.Close()
		fasthttp.ReleaseResponse(resp)
		cancel()
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("two streams read to their end took %d connections, want 1", n)
	}
	// Closed after its first event (on the pooled connection): the
	// connection goes, and the next stream dials anew.
	resp, body := stream(context.Background())
	if _, err := body.Read(buf); err != nil {
		t.Fatal(err)
	}
	body.Close()
	fasthttp.ReleaseResponse(resp)
	resp, body = stream(context.Background())
	body.Close()
	fasthttp.ReleaseResponse(resp)
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (a stream closed early is not reused)", n)
	}
}

// Cancelling the call's context mid-stream fails the blocked read at once.
func TestFastUpstreamStreamHonoursTheCallContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	up := newFastUpstream(srv.URL, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	req := fastRequest(srv.URL+"/v1/chat/completions", `{}`)
	resp := fasthttp.AcquireResponse()
	body, err := up.doStream(ctx, time.Time{}, req, resp)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := body.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if _, err := body.Read(buf); err == nil {
		t.Fatal("read after cancel succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	body.Close()
	fasthttp.ReleaseResponse(resp)
}

// A Read that has bytes does not wait for the last chunk's trailer: the
// upstream sent the last event and the zero-size chunk, but not yet the
// blank line that ends the body.
func TestFastUpstreamStreamReadDoesNotWaitForTheTrailer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	readDone := make(chan struct{})
	var trailerSent atomic.Bool
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Read(make([]byte, 4096)) // the request
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"9\r\ndata: 0\n\n\r\n0\r\n")
		select {
		case <-readDone:
		case <-time.After(2 * time.Second):
		}
		trailerSent.Store(true)
		_, _ = io.WriteString(c, "\r\n")
		time.Sleep(100 * time.Millisecond)
	}()
	url := "http://" + ln.Addr().String()
	up := newFastUpstream(url, 1<<20)
	req := fastRequest(url+"/v1/chat/completions", `{"stream":true}`)
	resp := fasthttp.AcquireResponse()
	body, err := up.doStream(context.Background(), time.Now().Add(5*time.Second), req, resp)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	n, err := body.Read(buf)
	if err != nil || string(buf[:n]) != "data: 0\n\n" || trailerSent.Load() {
		t.Fatalf("read %q %v; waited for the trailer: %v", buf[:n], err, trailerSent.Load())
	}
	close(readDone)
	if n, err := body.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("then %d %v, want EOF", n, err)
	}
	body.Close()
	fasthttp.ReleaseResponse(resp)
}
