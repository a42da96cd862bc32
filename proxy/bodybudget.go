package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// bodyBudget bounds the bytes of request bodies the gateway holds at once.
// Under overload the calls queue, and each queued call would otherwise hold
// its whole body (read before the call can start): memory grows with the
// queue until the process is killed. A call takes its body's size before
// reading it and gives it back when it is settled; one that finds no room
// waits (its body stays in the socket, which slows the client down) at
// most a bounded time, then is refused.
//
// The common case is one atomic operation each way; waiters only exist under
// overload and share one wake-up channel, replaced at each release.
type bodyBudget struct {
	max     int64
	used    atomic.Int64
	waiters atomic.Int32

	mu    sync.Mutex
	freed chan struct{} // closed by a release while someone waits
}

func newBodyBudget(max int64) *bodyBudget {
	return &bodyBudget{max: max, freed: make(chan struct{})}
}

// acquire takes n bytes, waiting at most wait for room; false when there
// was none. A body larger than the whole budget takes all of it, so it is
// served alone rather than never. A nil budget has room for everything.
func (b *bodyBudget) acquire(n int64, wait time.Duration) (taken int64, ok bool) {
	if b == nil || n <= 0 {
		return 0, true
	}
	n = min(n, b.max)
	if b.tryTake(n) {
		return n, true
	}
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	var timer *time.Timer
	for {
		// The channel is read before the retry: any release after the
		// retry fails closes it, or closed it already, so no wake-up is
		// missed.
		b.mu.Lock()
		freed := b.freed
		b.mu.Unlock()
		if b.tryTake(n) {
			if timer != nil {
				timer.Stop()
			}
			return n, true
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		select {
		case <-freed:
		case <-timer.C:
			return 0, false
		}
	}
}

// take adds n bytes without waiting: a chunked body found larger than it
// was assumed to be once read.
func (b *bodyBudget) take(n int64) {
	if b != nil && n > 0 {
		b.used.Add(n)
	}
}

// tryTake takes n bytes if they fit. A compare-and-swap, not an add undone
// on failure: an add would overshoot for a moment and make a smaller body
// that fits fail alongside.
func (b *bodyBudget) tryTake(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// release gives n bytes back and wakes the waiters, if any.
func (b *bodyBudget) release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.used.Add(-n)
	if b.waiters.Load() > 0 {
		b.mu.Lock()
		close(b.freed)
		b.freed = make(chan struct{})
		b.mu.Unlock()
	}
}
