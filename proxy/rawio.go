package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a nonblocking TCP socket with raw system calls,
// through the runtime's poller for the waits (syscall.RawConn), as
// net.Conn's own Read and Write do. The difference is the system call: a
// read or write of a nonblocking socket never blocks, yet the runtime's
// (syscall.Syscall) marks each as one that might, and the first of a busy
// spell after the process sat idle wakes the runtime's monitor thread
// (sysmon), which then polls every 20 µs until all is idle again. At a few
// thousand calls a second on a shared core those wake-ups were a sixth of
// the gateway's CPU and a context switch in the path of each call.
type rawIO struct {
	rc   syscall.RawConn
	conn net.Conn // for the errors' addresses

	// The closures given to rc are made once per connection (a closure
	// per call would be an allocation per read); what they read and write
	// is here, under rmu and wmu, as net.Conn allows concurrent calls.
	readFn, writeFn func(fd uintptr) bool
	rmu, wmu        sync.Mutex
	rbuf, wbuf      []byte
	rn, wn          int
	rerr, werr      syscall.Errno
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
	r.readFn = r.read
	r.writeFn = r.write
	return r
}

func (r *rawIO) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.rbuf))), uintptr(len(r.rbuf)))
		switch e {
		case 0:
			r.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park until readable
		default:
			r.rerr = e
			return true
		}
	}
}

func (r *rawIO) write(fd uintptr) bool {
	for r.wn < len(r.wbuf) {
		rest := r.wbuf[r.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch e {
		case 0:
			r.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // park until writable
		default:
			r.werr = e
			return true
		}
	}
	return true
}

// Read is net.Conn's Read.
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rmu.Lock()
	r.rbuf, r.rn, r.rerr = p, 0, 0
	err := r.rc.Read(r.readFn)
	n, e := r.rn, r.rerr
	r.rbuf = nil
	r.rmu.Unlock()
	switch {
	case err != nil:
		return 0, r.opError("read", err)
	case e != 0:
		return 0, r.opError("read", os.NewSyscallError("read", e))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write is net.Conn's Write: all of p, or an error.
func (r *rawIO) Write(p []byte) (int, error) {
	r.wmu.Lock()
	r.wbuf, r.wn, r.werr = p, 0, 0
	err := r.rc.Write(r.writeFn)
	n, e := r.wn, r.werr
	r.wbuf = nil
	r.wmu.Unlock()
	switch {
	case err != nil:
		return n, r.opError("write", err)
	case e != 0:
		return n, r.opError("write", os.NewSyscallError("write", e))
	}
	return n, nil
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

// rawConn is an accepted TCP connection whose reads and writes are rawIO's.
type rawConn struct {
	*net.TCPConn
	io *rawIO
}

func (c *rawConn) Read(p []byte) (int, error)  { return c.io.Read(p) }
func (c *rawConn) Write(p []byte) (int, error) { return c.io.Write(p) }

// rawListener accepts connections as rawConn.
type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if r := newRawIO(c); r != nil {
		return &rawConn{TCPConn: c.(*net.TCPConn), io: r}, nil
	}
	return c, nil
}
