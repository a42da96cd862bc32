package proxy

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a nonblocking TCP socket with raw system calls,
// through the runtime's poller for the waits (syscall.RawConn), as
// net.Conn's own Read and Write do. The difference is the system call: a
// read or write of a nonblocking socket never blocks, yet the runtime's
// (syscall.Syscall) marks each as one that might, and the first of a busy
// spell after the process sat idle wakes the runtime's monitor thread
// (sysmon), which then polls until all is idle again: at a steady moderate
// load, wake-ups in the path of each call and CPU spent on them
// (docs/performance.md, "Tuning below the libraries").
type rawIO struct {
	rc   syscall.RawConn
	conn net.Conn // for the errors' addresses
	r, w rawHalf
}

// rawHalf is one direction of a rawIO. Its closure, given to rc, is made
// once per connection (a closure per call would be an allocation per
// read); what it reads or writes is here, under mu, as net.Conn allows
// concurrent calls.
type rawHalf struct {
	mu    sync.Mutex
	fn    func(fd uintptr) bool // read, or writev
	buf   []byte                // what read fills
	bufs  [][]byte              // what writev has still to write
	one   [1][]byte             // bufs of a Write
	n     int
	errno syscall.Errno
}

// newRawIO returns c's raw reader and writer, or nil when c is not a TCP
// connection.
func newRawIO(c net.Conn) *rawIO {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{rc: rc, conn: c}
	r.r.fn = r.r.read
	r.w.fn = r.w.writev
	return r
}

// read is one read(2) into buf; false asks the poller to wait.
func (h *rawHalf) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(h.buf))), uintptr(len(h.buf)))
		switch e {
		case 0:
			h.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park until readable
		default:
			h.errno = e
			return true
		}
	}
}

// maxGather bounds the pieces of one writev: a request's buffered head,
// its body, the buffer's last bytes.
const maxGather = 4

// writev is writev(2)s until bufs are written; false asks the poller to
// wait. A Write is a writev of one piece: the kernel's path for write(2).
func (h *rawHalf) writev(fd uintptr) bool {
	// Empty pieces ahead are skipped: an empty Write makes no system call.
	for h.bufs = consumed(h.bufs, 0); len(h.bufs) > 0; {
		var iov [maxGather]syscall.Iovec
		n := 0
		for _, b := range h.bufs[:min(len(h.bufs), maxGather)] {
			iov[n].Base = unsafe.SliceData(b)
			iov[n].SetLen(len(b))
			n++
		}
		w, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
		switch e {
		case 0:
			h.n += int(w)
			h.bufs = consumed(h.bufs, int(w))
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // park until writable
		default:
			h.errno = e
			return true
		}
	}
	return true
}

// consumed drops the first n bytes of bufs.
func consumed(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}

// done ends a read or a write through the poller (RawConn's Read or
// Write, err): the bytes moved, and net.Conn's error, h unlocked.
func (r *rawIO) done(h *rawHalf, op string, err error) (int, error) {
	n, e := h.n, h.errno
	h.buf, h.bufs, h.one[0] = nil, nil, nil
	h.mu.Unlock()
	switch {
	case err != nil:
		return n, r.opError(op, err)
	case e != 0:
		return n, r.opError(op, os.NewSyscallError(op, e))
	}
	return n, nil
}

// Read is net.Conn's Read.
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	h := &r.r
	h.mu.Lock()
	h.buf, h.n, h.errno = p, 0, 0
	n, err := r.done(h, "read", r.rc.Read(h.fn))
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

// Write is net.Conn's Write: all of p, or an error.
func (r *rawIO) Write(p []byte) (int, error) {
	h := &r.w
	h.mu.Lock()
	h.one[0] = p
	return r.writev(h, h.one[:])
}

// Writev writes the pieces in order, as one write of their concatenation
// would (net.Buffers' WriteTo, without the scheduler's system call): all
// of them, or an error. It may change bufs' elements.
func (r *rawIO) Writev(bufs [][]byte) (int, error) {
	h := &r.w
	h.mu.Lock()
	return r.writev(h, bufs)
}

// writev runs the writer's writev on bufs; h is locked.
func (r *rawIO) writev(h *rawHalf, bufs [][]byte) (int, error) {
	h.bufs, h.n, h.errno = bufs, 0, 0
	return r.done(h, "write", r.rc.Write(h.fn))
}

// opError wraps err as net.Conn's methods do; the poller's own errors
// (a deadline, a closed connection) come wrapped by RawConn, and are
// unwrapped to what a net.Conn returns.
func (r *rawIO) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: err}
}

// rawConn is an accepted TCP connection whose reads and writes are
// rawIO's (the net.Conn's own when io is nil).
type rawConn struct {
	*net.TCPConn
	io *rawIO
	// l counted the connection in (listener.admit), under addr; nil when
	// uncounted.
	l      *listener
	addr   netip.Addr
	closes atomic.Bool
}

func (c *rawConn) Read(p []byte) (int, error) {
	if c.io == nil {
		return c.TCPConn.Read(p)
	}
	return c.io.Read(p)
}

func (c *rawConn) Write(p []byte) (int, error) {
	if c.io == nil {
		return c.TCPConn.Write(p)
	}
	return c.io.Write(p)
}

// Close closes the connection and counts it out of its listener, once.
func (c *rawConn) Close() error {
	err := c.TCPConn.Close()
	if c.l != nil && !c.closes.Swap(true) {
		c.l.closed(c.addr)
	}
	return err
}

// rawListener accepts connections as rawConn.
type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return l.wrap(c), nil
}

// wrap returns c as a rawConn when it is a TCP connection.
func (rawListener) wrap(c net.Conn) net.Conn {
	if r := newRawIO(c); r != nil {
		return &rawConn{TCPConn: c.(*net.TCPConn), io: r}
	}
	return c
}
