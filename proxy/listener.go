package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// listener is the data plane's listener. Its Accept never ends serving:
// fasthttp's Serve returns at the first accept error that is not a
// timeout, and a process out of descriptors (EMFILE, ENFILE) would then
// keep its port open with nothing accepting. Here every error but the
// listener's close is retried with backoff, and ready reports it meanwhile.
//
// It also bounds the open TCP connections, in total and per client address:
// a connection past either bound is answered 503 and closed before
// anything of it is read, by the accepting goroutine (a few hundred bytes
// into an empty socket buffer never block it). TCP connections come out
// as rawConn.
type listener struct {
	net.Listener
	log *slog.Logger
	// max and perAddr are the bounds; 0 for none.
	max, perAddr int

	open  atomic.Int64 // connections accepted and not yet closed
	mu    sync.Mutex
	peers map[netip.Addr]int // open connections per address, when perAddr > 0

	done      chan struct{} // closed by Close: ends a backoff early
	closeOnce sync.Once

	// failedAt is the time of the last accept error (Unix nanoseconds), 0
	// once an accept succeeds; failErr is that error.
	failedAt atomic.Int64
	failErr  atomic.Pointer[error]

	// The accepting goroutine's own: log lines at a bounded rate.
	loggedAt time.Time
	unlogged int
	refused  int
}

const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
	// acceptFailWindow is how long after its last accept error the
	// listener counts as failing: longer than the backoff's cap, so that a
	// failure that persists is never seen as over between two retries.
	acceptFailWindow = 2 * maxAcceptBackoff
	// logEvery bounds the rate of the listener's warnings: under a flood
	// of refused connections, one line per connection would be a second
	// flood.
	logEvery = 10 * time.Second
)

func newListener(ln net.Listener, log *slog.Logger, max, perAddr int) *listener {
	l := &listener{Listener: ln, log: log, max: max, perAddr: perAddr, done: make(chan struct{})}
	if perAddr > 0 {
		l.peers = map[netip.Addr]int{}
	}
	return l
}

// Accept returns the next connection within the bounds; it returns an error
// only once the listener is closed.
func (l *listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			delay = min(max(2*delay, minAcceptBackoff), maxAcceptBackoff)
			l.acceptFailed(err)
			select {
			case <-l.done:
				return nil, net.ErrClosed
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if l.failedAt.Load() != 0 {
			l.failedAt.Store(0)
			l.log.Info("data plane accepting connections again")
		}
		if rc, ok := l.admit(c); ok {
			return rc, nil
		}
	}
}

// Close closes the listener and ends a backoff in progress.
func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *listener) acceptFailed(err error) {
	l.failErr.Store(&err)
	l.failedAt.Store(time.Now().UnixNano())
	l.unlogged++
	if time.Since(l.loggedAt) >= logEvery {
		l.log.Warn("data plane cannot accept connections; retrying", "err", err, "errors", l.unlogged,
			"fd_limit", openFileLimit())
		l.loggedAt, l.unlogged = time.Now(), 0
	}
}

// admit counts c in, or refuses it when a bound is reached.
func (l *listener) admit(c net.Conn) (net.Conn, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, true // no client address to count
	}
	var addr netip.Addr
	if a, ok := tc.RemoteAddr().(*net.TCPAddr); ok && l.perAddr > 0 {
		addr = a.AddrPort().Addr().Unmap()
	}
	if n := l.open.Add(1); l.max > 0 && n > int64(l.max) {
		l.open.Add(-1)
		l.refuse(c, "limits.max_connections")
		return nil, false
	}
	if l.perAddr > 0 {
		l.mu.Lock()
		n := l.peers[addr] + 1
		if n <= l.perAddr {
			l.peers[addr] = n
		}
		l.mu.Unlock()
		if n > l.perAddr {
			l.open.Add(-1)
			l.refuse(c, "limits.max_connections_per_ip")
			return nil, false
		}
	}
	return &rawConn{TCPConn: tc, io: newRawIO(c), l: l, addr: addr}, true
}

// closed counts out a connection admit counted in.
func (l *listener) closed(addr netip.Addr) {
	l.open.Add(-1)
	if l.perAddr > 0 {
		l.mu.Lock()
		if n := l.peers[addr] - 1; n > 0 {
			l.peers[addr] = n
		} else {
			delete(l.peers, addr) // the map holds only addresses connected now
		}
		l.mu.Unlock()
	}
}

// refusal is the answer to a connection past a bound. Which API the
// client speaks is not known before its request is read, so the body is
// both formats at once: OpenAI's SDKs read error.message and error.code,
// Anthropic's the top-level type and error.type; both retry a 503 after
// Retry-After.
var refusal = func() []byte {
	body := `{"type":"error","error":{"type":"overloaded_error","code":"service_unavailable",` +
		`"message":"the gateway holds too many connections; retry shortly"}}`
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()

func (l *listener) refuse(c net.Conn, bound string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second)) // never hold up accepting
	_, _ = c.Write(refusal)
	_ = c.Close()
	l.refused++
	if time.Since(l.loggedAt) >= logEvery {
		l.log.Warn("data plane refusing connections", "bound", bound, "refused", l.refused)
		l.loggedAt, l.refused = time.Now(), 0
	}
}

// ready is nil while the listener accepts connections, or says why not.
func (l *listener) ready() error {
	if t := l.failedAt.Load(); t != 0 && time.Since(time.Unix(0, t)) < acceptFailWindow {
		return fmt.Errorf("data plane cannot accept connections: %w", *l.failErr.Load())
	}
	if l.max > 0 && l.open.Load() >= int64(l.max) {
		return fmt.Errorf("data plane holds limits.max_connections (%d) connections", l.max)
	}
	return nil
}

// openFileLimit is the process's open-file limit, or 0 when unknown.
func openFileLimit() uint64 {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0
	}
	return r.Cur
}
