package telemetry

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func droppedNotice(n int64) []byte { return []byte("dropped " + strconv.FormatInt(n, 10) + "\n") }

// Lines written from many goroutines come out whole, each goroutine's in
// its order, all of them by the time Close returns; a line written after
// Close goes straight through.
func TestLogWriterKeepsEveryLineInOrder(t *testing.T) {
	var out bytes.Buffer // read once Close has returned: the writer goroutine is done
	w := NewLogWriter(&out, 1<<20, 0, droppedNotice)
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(w, "g%d line %d\n", g, i)
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(w, "after close\n")
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != writers*lines+1 || got[len(got)-1] != "after close" {
		t.Fatalf("%d lines, last %q; want %d and the line written after Close", len(got), got[len(got)-1], writers*lines+1)
	}
	next := make([]int, writers)
	for _, l := range got[:len(got)-1] {
		var g, i int
		if _, err := fmt.Sscanf(l, "g%d line %d", &g, &i); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: line %d where %d was next", g, i, next[g])
		}
		next[g]++
	}
}

// countingWriter counts its writes and closes first at the first one.
type countingWriter struct {
	writes int
	first  chan struct{}
	bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.writes++; c.writes == 1 {
		close(c.first)
	}
	return c.Buffer.Write(p)
}

// With a linger, the lines that arrive while the writer lingers go out
// with the one that woke it, in one write; Close does not wait the linger
// out (an hour here) and writes everything.
func TestLogWriterLingerGathersLines(t *testing.T) {
	for _, tc := range []struct {
		linger   time.Duration
		oneWrite bool
		what     string
	}{
		{time.Hour, true, "lingering"},
		{0, false, "at once"},
	} {
		out := &countingWriter{first: make(chan struct{})} // read once Close has returned
		w := NewLogWriter(out, 1<<20, tc.linger, droppedNotice)
		w.Write([]byte("first\n"))
		if tc.linger == 0 {
			<-out.first // written by itself
		} else {
			time.Sleep(20 * time.Millisecond) // the writer wakes and lingers
		}
		for i := range 9 {
			fmt.Fprintf(w, "line %d\n", i)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out.String(), "\n"); n != 10 {
			t.Fatalf("%s: %d lines written, want 10", tc.what, n)
		}
		if got := out.writes == 1; got != tc.oneWrite {
			t.Fatalf("%s: %d writes", tc.what, out.writes)
		}
	}
}

// gatedWriter blocks every write until open is closed, as a log pipe whose
// reader has stopped does.
type gatedWriter struct {
	open, entered chan struct{}
	once          sync.Once
	bytes.Buffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.Buffer.Write(p)
}

// A destination that stops taking writes does not stop the writers: past
// the bound, lines are dropped at once and counted, and the count is
// reported once the destination takes writes again.
func TestLogWriterDropsInsteadOfWaiting(t *testing.T) {
	out := &gatedWriter{open: make(chan struct{}), entered: make(chan struct{})}
	w := NewLogWriter(out, 100, 0, droppedNotice)
	line := []byte("0123456789\n") // 11 bytes
	w.Write(line)
	<-out.entered // the writer goroutine took it and waits at the gate
	finished := make(chan struct{})
	go func() {
		for range 50 { // 9 fit in the buffer, 41 do not
			w.Write(line)
		}
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("a write waited for the stalled destination")
	}
	close(out.open)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat(string(line), 10) + "dropped 41\n"
	if got := out.String(); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// BenchmarkLogLineToFile is one call's log line handed to a file on disk:
// written in the caller's goroutine under a lock, and queued for the
// LogWriter's goroutine, which writes what gathered. After each line the
// caller yields, as a call does when it waits on its sockets, so that on one core (-cpu 1) the writer goroutine's work is in
// the figure too; "dropped" must stay 0.
func BenchmarkLogLineToFile(b *testing.B) {
	line := []byte(`{"time":"2026-12-01T05:27:36.346159973Z","level":"INFO","msg":"model call","run_id":"r0haltline-warm-0-0","session_id":"s-r0haltline-warm-0-0","tenant":"key-964111b82a66","team":"","api":"openai.chat","model":"gpt-4o-mini","status":200,"step":1,"input_tokens":512,"output_tokens":24,"cost_usd":0.000072,"duration_ms":2.581,"overhead_ms":2.105,"upstream_ms":0.475}` + "\n")
	var dropped atomic.Int64
	notice := func(n int64) []byte { dropped.Add(n); return droppedNotice(n) }
	for _, bc := range []struct {
		name string
		wrap func(io.Writer) (io.Writer, func())
	}{
		{"direct", func(f io.Writer) (io.Writer, func()) { return &lockedWriter{w: f}, func() {} }},
		{"queued", func(f io.Writer) (io.Writer, func()) {
			w := NewLogWriter(f, 4<<20, 0, notice)
			return w, func() { w.Close() }
		}},
		{"queued-lingering", func(f io.Writer) (io.Writer, func()) {
			w := NewLogWriter(f, 4<<20, 5*time.Millisecond, notice)
			return w, func() { w.Close() }
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			w, done := bc.wrap(f)
			dropped.Store(0)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = w.Write(line)
				runtime.Gosched()
			}
			done()
			b.ReportMetric(float64(dropped.Load()), "dropped")
		})
	}
}

// lockedWriter is the "direct" case's writer: a write(2) per line, in the
// caller's goroutine, under a lock.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
