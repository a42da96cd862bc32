package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

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
