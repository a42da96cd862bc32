package store

import (
	"sync"
	"sync/atomic"
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
type GroupCommitter struct {
	commit func(batches [][]Op) error
	queue  chan groupItem
	done   chan struct{}

	inline   bool
	commitMu sync.Mutex   // held during a commit, by the writer or an inline Apply
	queued   atomic.Int64 // batches sent to the writer and not yet committed
	one      [1][]Op      // an inline commit's batches, under commitMu

	// closeMu orders Apply's send against Close's close of the queue.
	closeMu sync.RWMutex
	closed  bool

	errMu   sync.Mutex
	lastErr error
}

type groupItem struct {
	ops []Op
	res chan error
}

// NewGroupCommitter starts the writer goroutine; commit applies the
// batches, in order, atomically. inline lets Apply commit a batch itself
// when nothing else is queued (see GroupCommitter); a store whose commit
// is slow and whose callers need not wait for it (an fsync per commit)
// leaves it off.
func NewGroupCommitter(commit func(batches [][]Op) error, inline bool) *GroupCommitter {
	g := &GroupCommitter{commit: commit, inline: inline, queue: make(chan groupItem, 1024), done: make(chan struct{})}
	go g.writer()
	return g
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
		// Checked again under the lock: the writer may have taken a batch
		// from the queue and not yet committed it.
		if g.queued.Load() == 0 {
			g.one[0] = ops
			err := g.commit(g.one[:])
			g.one[0] = nil
			g.commitMu.Unlock()
			g.setLastError(err)
			if err != nil {
				return failed(err)
			}
			return committed
		}
		g.commitMu.Unlock()
	}
	res := make(chan error, 1)
	g.queued.Add(1)
	g.queue <- groupItem{ops: ops, res: res}
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
		n := len(it.ops)
	drain:
		for n < MaxBatch {
			select {
			case q, ok := <-g.queue:
				if !ok {
					break drain
				}
				items = append(items, q)
				n += len(q.ops)
			default:
				break drain
			}
		}
		batches = batches[:0]
		for _, it := range items {
			batches = append(batches, it.ops)
		}
		g.commitMu.Lock()
		err := g.commit(batches)
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
	close(g.queue)
	g.closeMu.Unlock()
	<-g.done
	return true
}
