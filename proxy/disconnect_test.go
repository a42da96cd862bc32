package proxy

import (
	"net"
	"testing"
	"time"
)

func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// A call that ends before the delay never starts a watch; one that runs
// longer notices the client's hang-up.
func TestWatchHangupAfter(t *testing.T) {
	server, client := tcpPair(t)
	closed := make(chan struct{}, 1)
	w := watchHangupAfter(server, 20*time.Millisecond, func() { closed <- struct{}{} })
	w.Stop()
	client.Close()
	time.Sleep(60 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("a watch stopped before its delay still ran")
	default:
	}

	server, client = tcpPair(t)
	w = watchHangupAfter(server, 5*time.Millisecond, func() { closed <- struct{}{} })
	defer w.Stop()
	time.Sleep(20 * time.Millisecond)
	client.Close()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the hang-up was not noticed")
	}
}

// A call that outlasts the body's read deadline, still armed when its
// watch starts, keeps its watch: the hang-up after it is noticed.
func TestWatchHangupOutlastsReadDeadline(t *testing.T) {
	server, client := tcpPair(t)
	_ = server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	closed := make(chan struct{}, 1)
	stop := watchHangup(server, func() { closed <- struct{}{} })
	defer stop()
	time.Sleep(60 * time.Millisecond) // past the deadline
	client.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the hang-up after the body's read deadline was not noticed")
	}
}
