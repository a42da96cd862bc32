package store

import "sync"

// GroupCommitter is the write policy both stores share: Apply queues a batch
// of ops; one goroutine commits everything queued since its last commit in
// one transaction (at most MaxBatch ops, unless one Apply has more), so the
// cost of a commit (an fsync, a round trip) is shared by the calls in flight.
type GroupCommitter struct {
	commit func(batches [][]Op) error
	queue  chan groupItem
	done   chan struct{}

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
// batches, in order, atomically.
func NewGroupCommitter(commit func(batches [][]Op) error) *GroupCommitter {
	g := &GroupCommitter{commit: commit, queue: make(chan groupItem, 1024), done: make(chan struct{})}
	go g.writer()
	return g
}

// Apply queues ops; the channel receives the commit's result once.
func (g *GroupCommitter) Apply(ops []Op) <-chan error {
	res := make(chan error, 1)
	g.closeMu.RLock()
	defer g.closeMu.RUnlock()
	if g.closed {
		res <- ErrClosed
		return res
	}
	g.queue <- groupItem{ops: ops, res: res}
	return res
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
		err := g.commit(batches)
		g.errMu.Lock()
		g.lastErr = err
		g.errMu.Unlock()
		for _, it := range items {
			it.res <- err
		}
	}
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
