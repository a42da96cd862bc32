package store

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// GroupCommitter is the write policy both stores share: Apply queues a batch
// of ops; one goroutine commits everything queued since its last commit in
// one transaction (at most MaxBatch ops, unless one Apply has more), so the
// cost of a commit (an fsync, a round trip) is shared by the calls in flight.
//
// With inline commits, an Apply that finds nothing queued and no commit
// running commits its batch itself, in its own goroutine: the common case
// below saturation, where handing the batch to the writer and its result
// back would cost two goroutine switches for a group of one. Whoever
// commits holds commitMu, and an Apply commits inline only when nothing
// queued before it is still uncommitted, so batches commit in Apply order
// as before.
//
// Later queues a batch nobody waits for: it goes out at the head of the
// next commit, or by itself after laterWait if no commit comes first. A
// call's first write (its reservation, before the provider answers) thus
// shares the write(2) of the commit that acknowledges some call's end —
// most often its own — instead of costing one of its own.
type GroupCommitter struct {
	commit func(batches [][]Op) error
	queue  chan groupItem
	done   chan struct{}

	inline   bool
	commitMu sync.Mutex    // held during a commit, by the writer or an inline Apply
	queued   atomic.Int64  // batches sent to the writer and not yet committed
	commits  atomic.Uint64 // commits made, for Commits
	one      [2][]Op       // an inline commit's batches, under commitMu

	// laterMu orders the taking of the Later ops with the Apply that takes
	// them: an Apply takes them and is queued (or commits inline) before
	// any later Apply, so they commit ahead of every write after them.
	laterMu    sync.Mutex
	later      []Op
	laterTimer *time.Timer
	laterWait  time.Duration // laterWait; tests lengthen it

	// closeMu orders Apply's send against Close's close of the queue.
	closeMu sync.RWMutex
	closed  bool

	errMu   sync.Mutex
	lastErr error
}

type groupItem struct {
	later []Op // Later's ops taken by this Apply: committed before ops
	ops   []Op
	res   chan error
}

// laterWait bounds how long a Later batch waits for a commit to share: the
// window in which a crash of the process can lose it.
const laterWait = time.Millisecond

// NewGroupCommitter starts the writer goroutine; commit applies the
// batches, in order, atomically. inline lets Apply commit a batch itself
// when nothing else is queued (see GroupCommitter); a store whose commit
// is slow and whose callers need not wait for it (an fsync per commit)
// leaves it off.
func NewGroupCommitter(commit func(batches [][]Op) error, inline bool) *GroupCommitter {
	g := &GroupCommitter{commit: commit, inline: inline, queue: make(chan groupItem, 1024), done: make(chan struct{}), laterWait: laterWait}
	g.laterTimer = time.AfterFunc(time.Hour, g.flushLater)
	g.laterTimer.Stop()
	go g.writer()
	return g
}

// Later queues ops to be committed with the next commit, ahead of its own
// batches, or within laterWait at most. Nobody learns the result but
// LastError; ordering against Apply is kept (see laterMu). The ops are
// handed over as with Apply.
func (g *GroupCommitter) Later(ops []Op) {
	if len(ops) == 0 {
		return
	}
	g.closeMu.RLock()
	defer g.closeMu.RUnlock()
	if g.closed {
		g.setLastError(ErrClosed)
		return
	}
	g.laterMu.Lock()
	if len(g.later) == 0 {
		g.laterTimer.Reset(g.laterWait)
		g.later = ops // handed over: no copy
	} else {
		g.later = append(g.later, ops...)
	}
	g.laterMu.Unlock()
}

// CancelLater drops the Later ops writing key in bucket b that no commit
// has taken yet, and reports whether it dropped any. A caller that knows
// such an op was the key's only write (a key written once, like a call's
// hold on its budget) may then leave out the delete that would follow it:
// the key never reached the log.
func (g *GroupCommitter) CancelLater(b Bucket, key []byte) bool {
	g.laterMu.Lock()
	defer g.laterMu.Unlock()
	n := len(g.later)
	g.later = slices.DeleteFunc(g.later, func(op Op) bool { return op.Writes(b, key) })
	if n > 0 && len(g.later) == 0 {
		// Nothing left to flush: a timer left armed would still wake the
		// process (and the runtime's sysmon, whose sleep ends at the next
		// timer) for nothing, once a call in the common case.
		g.laterTimer.Stop()
	}
	return len(g.later) < n
}

// takeLater hands the Later ops to the caller's commit; laterMu is held.
func (g *GroupCommitter) takeLater() []Op {
	l := g.later
	if len(l) > 0 {
		g.later = nil // the commit keeps the slice until it is done
		g.laterTimer.Stop()
	}
	return l
}

// flushLater commits the Later ops no commit took within laterWait.
func (g *GroupCommitter) flushLater() {
	g.laterMu.Lock()
	empty := len(g.later) == 0
	g.laterMu.Unlock()
	if !empty {
		g.Apply(nil)
	}
}

// Apply queues ops, or commits them at once (see GroupCommitter); a
// receive from the channel gives the commit's result.
func (g *GroupCommitter) Apply(ops []Op) <-chan error {
	g.closeMu.RLock()
	defer g.closeMu.RUnlock()
	if g.closed {
		return failed(ErrClosed)
	}
	if g.inline && g.queued.Load() == 0 && g.commitMu.TryLock() {
		// Never wait for laterMu while holding commitMu: a queued Apply
		// holds laterMu while its send waits for room in the queue, which
		// the writer makes only once it has commitMu — with the queue
		// full, that wait hung every writer (TestGroupCommitterKeepsApplyOrder
		// did, once, in CI). An Apply that finds laterMu taken queues.
		if g.laterMu.TryLock() {
			// Checked again under the locks: the writer may have taken a
			// batch from the queue and not yet committed it.
			if g.queued.Load() == 0 {
				later := g.takeLater()
				g.laterMu.Unlock()
				batches := g.one[:0]
				if len(later) > 0 {
					batches = append(batches, later)
				}
				if len(ops) > 0 {
					batches = append(batches, ops)
				}
				var err error
				if len(batches) > 0 {
					err = g.commit(batches)
					g.commits.Add(1)
				}
				g.one = [2][]Op{}
				g.commitMu.Unlock()
				g.setLastError(err)
				if err != nil {
					return failed(err)
				}
				return committed
			}
			g.laterMu.Unlock()
		}
		g.commitMu.Unlock()
	}
	return g.enqueue(ops)
}

// ApplyBehind is Apply for a caller that goes on without waiting for the
// commit: the batch always goes to the writer, which may commit it with
// others queued meanwhile, never in the caller's goroutine.
func (g *GroupCommitter) ApplyBehind(ops []Op) <-chan error {
	g.closeMu.RLock()
	defer g.closeMu.RUnlock()
	if g.closed {
		return failed(ErrClosed)
	}
	return g.enqueue(ops)
}

// enqueue sends ops to the writer; the caller holds closeMu for reading.
func (g *GroupCommitter) enqueue(ops []Op) <-chan error {
	res := make(chan error, 1)
	g.laterMu.Lock()
	g.queued.Add(1)
	g.queue <- groupItem{later: g.takeLater(), ops: ops, res: res}
	g.laterMu.Unlock()
	return res
}

// committed is the result of every successful inline commit: a closed
// channel, which gives nil to any number of receives, and costs no
// allocation per call.
var committed = func() chan error {
	c := make(chan error)
	close(c)
	return c
}()

// failed returns a channel holding err.
func failed(err error) <-chan error {
	c := make(chan error, 1)
	c <- err
	return c
}

func (g *GroupCommitter) writer() {
	defer close(g.done)
	items := make([]groupItem, 0, 64)
	batches := make([][]Op, 0, 64)
	for it := range g.queue {
		items = append(items[:0], it)
		n := len(it.later) + len(it.ops)
	drain:
		for n < MaxBatch {
			select {
			case q, ok := <-g.queue:
				if !ok {
					break drain
				}
				items = append(items, q)
				n += len(q.later) + len(q.ops)
			default:
				break drain
			}
		}
		batches = batches[:0]
		for _, it := range items {
			if len(it.later) > 0 {
				batches = append(batches, it.later)
			}
			if len(it.ops) > 0 {
				batches = append(batches, it.ops)
			}
		}
		g.commitMu.Lock()
		var err error
		if len(batches) > 0 { // an Apply(nil) whose Later ops another took
			err = g.commit(batches)
			g.commits.Add(1)
		}
		g.queued.Add(-int64(len(items)))
		g.commitMu.Unlock()
		g.setLastError(err)
		for _, it := range items {
			it.res <- err
		}
	}
}

func (g *GroupCommitter) setLastError(err error) {
	g.errMu.Lock()
	g.lastErr = err
	g.errMu.Unlock()
}

// Commits counts the commits made (each a write to the embedded store's
// log, or a round trip to Redis), for benchmarks and tools.
func (g *GroupCommitter) Commits() uint64 { return g.commits.Load() }

// LastError is the result of the last commit.
func (g *GroupCommitter) LastError() error {
	g.errMu.Lock()
	defer g.errMu.Unlock()
	return g.lastErr
}

// ClearError forgets the last commit's error (the backend is reachable
// again).
func (g *GroupCommitter) ClearError() {
	g.errMu.Lock()
	g.lastErr = nil
	g.errMu.Unlock()
}

// Closed reports whether Close was called.
func (g *GroupCommitter) Closed() bool {
	g.closeMu.RLock()
	defer g.closeMu.RUnlock()
	return g.closed
}

// Close commits what is queued and stops the writer; it reports whether
// this call closed it.
func (g *GroupCommitter) Close() bool {
	g.closeMu.Lock()
	if g.closed {
		g.closeMu.Unlock()
		return false
	}
	g.closed = true
	// Queued under closeMu's write lock, no Apply can slip in between.
	g.laterMu.Lock()
	g.laterTimer.Stop()
	if later := g.takeLater(); len(later) > 0 {
		g.queued.Add(1)
		g.queue <- groupItem{later: later, res: make(chan error, 1)}
	}
	g.laterMu.Unlock()
	close(g.queue)
	g.closeMu.Unlock()
	<-g.done
	return true
}
