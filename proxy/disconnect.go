package proxy

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// watchHangup calls onClose as soon as the client closes its connection,
// even while nothing is being written: fasthttp's RequestCtx is never
// cancelled and notices a dead peer only at its next write. It waits for
// readability on the socket through the runtime's poller and peeks, so no
// byte of a pipelined next request is consumed. stop ends the watch and
// must be called before the connection is used again.
func watchHangup(conn net.Conn, onClose func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	// The body's read deadline (Limits.BodyTimeout) is still armed: it
	// would end the watch of a call that outlasts it.
	_ = conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		_ = rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				return false // nothing yet: park until the socket is readable
			}
			if n == 0 || err != nil {
				onClose() // orderly close (EOF) or reset
			}
			return true
		})
	}()
	return func() {
		// A past deadline wakes the parked read; then the deadline is
		// cleared for the server's next read on this connection.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
	}
}

// hangupWatchDelay is how long a call runs before its hang-up watch starts.
// A watch costs a goroutine, a system call and two wake-ups; most calls
// that end within this time never need one, and a client that hangs up
// earlier is noticed when it starts.
const hangupWatchDelay = 10 * time.Millisecond

// watchHangupAfter is watchHangup started after delay, unless Stop comes
// first. One struct holds what three captured variables and two closures
// took at every call.
func watchHangupAfter(conn net.Conn, delay time.Duration, onClose func()) *delayedWatch {
	w := &delayedWatch{conn: conn, onClose: onClose}
	w.timer = time.AfterFunc(delay, w.start)
	return w
}

type delayedWatch struct {
	conn    net.Conn
	onClose func()
	timer   *time.Timer
	mu      sync.Mutex
	stopped bool
	stop    func() // the started watch's, once started
}

func (w *delayedWatch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stop = watchHangup(w.conn, w.onClose)
	}
}

// Stop ends the watch, or keeps it from starting; the connection can be
// used again once it returns.
func (w *delayedWatch) Stop() {
	w.timer.Stop()
	w.mu.Lock()
	w.stopped = true
	stop := w.stop
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}
