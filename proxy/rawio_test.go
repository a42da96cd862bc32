package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/nettest"
)

// rawPipe connects a client and an accepted server connection over
// loopback TCP, each wrapped by wrap.
func rawPipe(wrap func(net.Conn) net.Conn) nettest.MakePipe {
	return func() (c1, c2 net.Conn, stop func(), err error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, nil, err
		}
		rl := rawListener{ln}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := rl.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}()
		dialed, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			ln.Close()
			return nil, nil, nil, err
		}
		server, ok := <-accepted
		if !ok {
			dialed.Close()
			ln.Close()
			return nil, nil, nil, errors.New("accept failed")
		}
		client := wrap(dialed)
		stop = func() {
			client.Close()
			server.Close()
			ln.Close()
		}
		return client, server, stop, nil
	}
}

// An accepted connection and an upstream one read and write with raw
// system calls and behave as net.Conn must: x/net's conformance tests
// (concurrent reads and writes, deadlines past, present and future,
// close during a blocked read or write).
func TestRawConnIsANetConn(t *testing.T) {
	t.Run("accepted", func(t *testing.T) {
		nettest.TestConn(t, rawPipe(func(c net.Conn) net.Conn { return c }))
	})
	t.Run("upstream", func(t *testing.T) {
		nettest.TestConn(t, rawPipe(func(c net.Conn) net.Conn { return &upstreamConn{Conn: c, raw: newRawIO(c)} }))
	})
}

func TestRawListenerWrapsTCPConns(t *testing.T) {
	c1, c2, stop, err := rawPipe(func(c net.Conn) net.Conn { return &upstreamConn{Conn: c, raw: newRawIO(c)} })()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, ok := c2.(*rawConn); !ok {
		t.Fatalf("accepted %T, want *rawConn", c2)
	}
	if c1.(*upstreamConn).raw == nil {
		t.Fatal("a dialed TCP connection has no raw reader")
	}
	// A connection that is not TCP is served as it is.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if newRawIO(a) != nil {
		t.Fatal("raw I/O on a pipe")
	}
}

// What net.Conn's methods return in the cases callers tell apart: a
// deadline, EOF, a closed connection, a write larger than the socket's
// buffers (which waits for room).
func TestRawConnErrors(t *testing.T) {
	c1, c2, stop, err := rawPipe(func(c net.Conn) net.Conn { return &upstreamConn{Conn: c, raw: newRawIO(c)} })()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, c := range []net.Conn{c1, c2} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		_, err := c.Read(make([]byte, 8))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%T read past its deadline: %v, want a timeout", c, err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("%T: %#v, want a *net.OpError of a read", c, err)
		}
		_ = c.SetReadDeadline(time.Time{})
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: more than the socket buffers hold
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(c2)
		got <- b
	}()
	if n, err := c1.Write(big); err != nil || n != len(big) {
		t.Fatalf("write of %d bytes: %d, %v", len(big), n, err)
	}
	c1.(*upstreamConn).Conn.(*net.TCPConn).CloseWrite()
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("read %d bytes back, want the %d written", len(b), len(big))
	}
	// The far end's close: EOF (ReadAll above ended on it), then a closed
	// connection's own error.
	c2.Close()
	if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed connection: %v, want net.ErrClosed", err)
	}
	if _, err := c2.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to a closed connection: %v, want net.ErrClosed", err)
	}
	if n, err := c1.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the far end closed: %d %v, want EOF", n, err)
	}
}

// A read and a write allocate nothing: the closures RawConn calls are made
// once per connection.
func TestRawConnDoesNotAllocate(t *testing.T) {
	c1, c2, stop, err := rawPipe(func(c net.Conn) net.Conn { return &upstreamConn{Conn: c, raw: newRawIO(c)} })()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	out, in := []byte("ping"), make([]byte, 4)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c1.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c2, in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations a write and read, want 0", allocs)
	}
}

// A request goes to a plain TCP upstream as the bytes fasthttp writes,
// whatever its body's size against the writer's buffer: empty, small, up
// to the buffer's edge, one byte over, ending exactly on a second
// buffer's edge, large, larger than the socket buffers (writev resumed
// after a partial write). Nothing of it is held afterwards.
func TestWriteRequestGathersTheBody(t *testing.T) {
	uc, c2 := upstreamPair(t)
	h := len(fasthttpBytes(t, newTestRequest(nil))) // the bytes before a body
	for _, size := range []int{0, 100, upstreamWriteBuffer - h, upstreamWriteBuffer - h + 1,
		2*upstreamWriteBuffer - h, 3*upstreamWriteBuffer + 7, 200 << 10, 4 << 20} {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		want := fasthttpBytes(t, newTestRequest(body))
		got := readN(c2, len(want))
		bw := bufio.NewWriterSize(uc, upstreamWriteBuffer)
		if err := writeRequest(uc, newTestRequest(body), bw); err != nil {
			t.Fatalf("body of %d bytes: %v", size, err)
		}
		if b := <-got; !bytes.Equal(b, want) {
			t.Fatalf("body of %d bytes: the upstream read %d bytes, not the %d fasthttp writes", size, len(b), len(want))
		}
		if len(uc.held) != 0 || uc.copied != nil || uc.gathering {
			t.Fatalf("body of %d bytes: %d pieces still held", size, len(uc.held))
		}
	}
}

// A streamed body (its pieces as many as it is long, through fasthttp's
// copy buffer) is written piece by piece, nothing held: intact.
func TestWriteRequestStreamedBody(t *testing.T) {
	uc, c2 := upstreamPair(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	stream := func() *fasthttp.Request {
		req := newTestRequest(nil)
		// Only a Reader: a WriterTo would hand the body over in one piece.
		req.SetBodyStream(struct{ io.Reader }{bytes.NewReader(body)}, len(body))
		return req
	}
	want := fasthttpBytes(t, stream())
	got := readN(c2, len(want))
	most := 0 // the most pieces held after a write
	bw := bufio.NewWriterSize(writerFunc(func(p []byte) (int, error) {
		n, err := uc.Write(p)
		most = max(most, len(uc.held))
		return n, err
	}), upstreamWriteBuffer)
	if err := writeRequest(uc, stream(), bw); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the upstream read %d bytes, not the %d fasthttp writes", len(b), len(want))
	}
	if most > 0 {
		t.Fatalf("%d pieces of a streamed body held", most)
	}
}

// upstreamPair is a dialed upstream connection with raw I/O and the
// server's end of it, closed when the test ends.
func upstreamPair(t *testing.T) (*upstreamConn, net.Conn) {
	t.Helper()
	c1, c2, stop, err := rawPipe(func(c net.Conn) net.Conn { return &upstreamConn{Conn: c, raw: newRawIO(c)} })()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c1.(*upstreamConn), c2
}

// fasthttpBytes is what fasthttp writes of req through a buffer of the
// upstream writer's size.
func fasthttpBytes(t *testing.T, req *fasthttp.Request) []byte {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriterSize(&b, upstreamWriteBuffer)
	if err := req.Write(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readN returns the next n bytes read from c (fewer if it fails), read in
// the background.
func readN(c net.Conn, n int) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		m, _ := io.ReadFull(c, b)
		got <- b[:m]
	}()
	return got
}

func newTestRequest(body []byte) *fasthttp.Request {
	req := &fasthttp.Request{}
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://127.0.0.1/v1/chat/completions")
	req.Header.Set("Content-Type", "application/json")
	req.SetBodyRaw(body)
	return req
}

func TestConsumed(t *testing.T) {
	for _, tc := range []struct {
		bufs []string
		n    int
		want []string
	}{
		{[]string{"ab", "cd"}, 0, []string{"ab", "cd"}},
		{[]string{"ab", "cd"}, 1, []string{"b", "cd"}},
		{[]string{"ab", "cd"}, 2, []string{"cd"}},
		{[]string{"ab", "cd"}, 3, []string{"d"}},
		{[]string{"ab", "cd"}, 4, []string{}},
		{[]string{"", "ab", ""}, 2, []string{}},
		{[]string{"", "ab"}, 0, []string{"ab"}},
	} {
		var bufs [][]byte
		for _, s := range tc.bufs {
			bufs = append(bufs, []byte(s))
		}
		var got []string
		for _, b := range consumed(bufs, tc.n) {
			got = append(got, string(b))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("consumed(%q, %d) = %q, want %q", tc.bufs, tc.n, got, tc.want)
		}
	}
}

// Writev writes more pieces than one writev(2) takes, in order.
func TestRawWritevManyPieces(t *testing.T) {
	uc, c2 := upstreamPair(t)
	var bufs [][]byte
	var want []byte
	for i := range 3*maxGather + 1 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 1000*i)
		bufs = append(bufs, p)
		want = append(want, p...)
	}
	got := readN(c2, len(want))
	if n, err := uc.raw.Writev(bufs); err != nil || n != len(want) {
		t.Fatalf("writev: %d, %v; want %d", n, err, len(want))
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read %d bytes, not the %d written in order", len(b), len(want))
	}
	// Nothing to write: no system call, no error.
	if n, err := uc.raw.Writev([][]byte{nil, {}}); n != 0 || err != nil {
		t.Fatalf("writev of empty pieces: %d, %v", n, err)
	}
	if n, err := uc.Write(nil); n != 0 || err != nil {
		t.Fatalf("empty write: %d, %v", n, err)
	}
}

// BenchmarkWriteRequest200KB writes a 200 KB request to a plain TCP
// upstream whose reader drains it in another goroutine: gathered (one
// writev) against fasthttp's own writes (the buffer's first 16 KB, then
// the rest).
func BenchmarkWriteRequest200KB(b *testing.B) {
	body := bytes.Repeat([]byte("You are the order desk assistant. "), 6000)
	for _, gather := range []bool{true, false} {
		name := "gathered"
		if !gather {
			name = "two-writes"
		}
		b.Run(name, func(b *testing.B) {
			c1, c2, stop, err := rawPipe(func(c net.Conn) net.Conn { return &upstreamConn{Conn: c, raw: newRawIO(c)} })()
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			go func() { _, _ = io.Copy(io.Discard, c2) }()
			req := newTestRequest(body)
			bw := bufio.NewWriterSize(c1, upstreamWriteBuffer)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if gather {
					err = writeRequest(c1, req, bw)
				} else if err = req.Write(bw); err == nil {
					err = bw.Flush()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
