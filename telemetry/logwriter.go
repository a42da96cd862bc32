package telemetry

import (
	"io"
	"sync"
	"time"
)

// LogWriter takes the gateway's log lines off the call path. Every model
// call writes a line; written in the call's goroutine, that is a write(2)
// before the answer leaves, and any stall of the destination — a pipe
// whose reader is slow, a file waiting on its file system's journal —
// stalls every call in flight behind the log's lock. Write only copies the line into a buffer; one
// goroutine writes what has gathered, in order, with one write(2) per
// batch (a busy gateway batches many lines).
//
// The buffer is bounded: when the destination cannot keep up and
// maxBuffered bytes wait, new lines are dropped, counted, and reported by
// a line of their own (notice) once the destination takes writes again.
// The data plane never waits for its log. A process killed outright loses
// the lines not yet written: what gathered since the writer's last
// write(2), the linger's worth unless the destination was stalling.
//
// The writer lingers after a line wakes it before it writes, so that the
// lines of the next few calls go out with it in one write(2). The write is
// not what costs: an ordinary system call made while the process was idle
// wakes the Go runtime's monitor thread (sysmon), which then polls until
// the process is idle again; the store's log is written raw
// (store.segment.writeRaw), so a call's log line would be the one system
// call of the call that does it.
type LogWriter struct {
	out    io.Writer
	max    int
	linger time.Duration
	notice func(dropped int64) []byte

	mu      sync.Mutex
	buf     []byte // lines waiting, whole
	dropped int64  // lines dropped since the last notice
	closed  bool

	spare     []byte // the writer goroutine's last batch buffer, for reuse
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewLogWriter starts the goroutine writing to out, linger after the
// first line of a batch (0: at once); notice formats the line that reports
// dropped lines. Close flushes and stops it, without waiting out a linger.
func NewLogWriter(out io.Writer, maxBuffered int, linger time.Duration, notice func(dropped int64) []byte) *LogWriter {
	w := &LogWriter{
		out: out, max: maxBuffered, linger: linger, notice: notice,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w
}

// Write queues one whole line (the handlers write one record a call); it
// never fails and never waits for the destination. After Close it writes
// through, so that nothing logged during shutdown is lost.
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		defer w.mu.Unlock()
		return w.out.Write(p)
	}
	if len(w.buf)+len(p) > w.max {
		w.dropped++
		w.mu.Unlock()
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Close writes what is queued and stops the writer goroutine.
func (w *LogWriter) Close() error {
	w.closeOnce.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

func (w *LogWriter) run() {
	defer close(w.done)
	var linger *time.Timer
	if w.linger > 0 {
		linger = time.NewTimer(w.linger)
		linger.Stop()
	}
	for {
		select {
		case <-w.wake:
			if linger != nil {
				linger.Reset(w.linger)
				select {
				case <-linger.C:
				case <-w.stop:
					linger.Stop()
					w.flush(true)
					return
				}
			}
			w.flush(false)
		case <-w.stop:
			w.flush(true)
			return
		}
	}
}

// flush writes the waiting lines, then the notice of lines dropped. The
// last flush marks the writer closed and holds the lock while it writes,
// so that a line written through after it comes after its batch.
func (w *LogWriter) flush(last bool) {
	w.mu.Lock()
	batch := w.buf
	w.buf = w.spare[:0]
	dropped := w.dropped
	w.dropped = 0
	if last {
		w.closed = true
		defer w.mu.Unlock()
	} else {
		w.mu.Unlock()
	}
	if len(batch) > 0 {
		_, _ = w.out.Write(batch)
	}
	if dropped > 0 && w.notice != nil {
		_, _ = w.out.Write(w.notice(dropped))
	}
	if cap(batch) > 1<<20 {
		batch = nil // a burst's buffer is not kept
	}
	w.spare = batch[:0]
}
