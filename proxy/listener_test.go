package proxy

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// failingListener fails its accepts as a process out of descriptors does,
// until told to stop.
type failingListener struct {
	net.Listener
	fail   chan error // each accept takes its error from here, or accepts
	failed chan struct{}
}

func (l *failingListener) Accept() (net.Conn, error) {
	select {
	case err := <-l.fail:
		l.failed <- struct{}{}
		return nil, err
	default:
		return l.Listener.Accept()
	}
}

// A failed accept (EMFILE, ENFILE, or any error but the listener's close)
// never ends serving: it is retried, the listener reports it until an
// accept succeeds, and the connection waiting meanwhile is served.
func TestAcceptRetriesFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln, fail: make(chan error, 3), failed: make(chan struct{}, 3)}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.EINVAL} {
		fl.fail <- &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	l := newListener(fl, slog.New(slog.DiscardHandler), 0, 0)
	if err := l.ready(); err != nil {
		t.Fatalf("ready before any accept: %v", err)
	}
	type result struct {
		c   net.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		accepted <- result{c, err}
	}()
	// The second failure comes after the first was recorded.
	for range 2 {
		select {
		case <-fl.failed:
		case r := <-accepted:
			t.Fatalf("Accept returned at a failure: %v", r.err)
		}
	}
	if err := l.ready(); err == nil || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("ready while accepts fail: %v", err)
	}
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := <-accepted
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	c := r.c
	defer c.Close()
	if c.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("accepted %v, want the waiting %v", c.RemoteAddr(), client.LocalAddr())
	}
	if err := l.ready(); err != nil {
		t.Fatalf("ready once an accept succeeded: %v", err)
	}
}

// Close ends a backoff in progress: Accept then reports the close, which
// is what ends fasthttp's Serve.
func TestAcceptBackoffEndsAtClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln, fail: make(chan error, 64), failed: make(chan struct{}, 64)}
	for range cap(fl.fail) {
		fl.fail <- os.NewSyscallError("accept4", syscall.EMFILE)
	}
	l := newListener(fl, slog.New(slog.DiscardHandler), 0, 0)
	done := make(chan error)
	go func() { _, err := l.Accept(); done <- err }()
	<-fl.failed
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}
