package store

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// An idle committer commits an inline Apply before Apply returns; a batch
// that arrives while a commit runs goes to the writer, and one that
// arrives while an earlier one waits for the writer queues behind it.
func TestGroupCommitterInline(t *testing.T) {
	var mu sync.Mutex
	var order []string
	block := make(chan struct{})
	first := true
	g := NewGroupCommitter(func(batches [][]Op) error {
		mu.Lock()
		hold := first
		first = false
		mu.Unlock()
		if hold {
			<-block
		}
		mu.Lock()
		for _, ops := range batches {
			order = append(order, string(ops[0].Key))
		}
		mu.Unlock()
		return nil
	}, true)
	defer g.Close()

	started := make(chan (<-chan error))
	go func() { started <- g.Apply([]Op{{Bucket: Runs, Key: []byte("a")}}) }() // inline, held in commit
	// Wait until a's commit holds the lock.
	waitFor(t, func() bool {
		if g.commitMu.TryLock() {
			g.commitMu.Unlock()
			return false
		}
		return true
	})
	b := g.Apply([]Op{{Bucket: Runs, Key: []byte("b")}}) // a commit runs: queued
	c := g.Apply([]Op{{Bucket: Runs, Key: []byte("c")}}) // b is queued: queued behind it
	select {
	case <-b:
		t.Fatal("b committed while a's commit held the lock")
	default:
	}
	close(block)
	if err := <-<-started; err != nil {
		t.Fatal(err)
	}
	if err := <-b; err != nil {
		t.Fatal(err)
	}
	if err := <-c; err != nil {
		t.Fatal(err)
	}
	d := g.Apply([]Op{{Bucket: Runs, Key: []byte("d")}})
	select {
	case err := <-d: // idle again: committed inline, before Apply returned
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("an Apply on an idle committer did not commit inline")
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[a b c d]" {
		t.Fatalf("commit order %v", order)
	}
}

// Each goroutine's batches commit in the order it applied them, whichever
// path each took, under contention (run with -race).
func TestGroupCommitterKeepsApplyOrder(t *testing.T) {
	for _, inline := range []bool{false, true} {
		var mu sync.Mutex
		last := map[string]int{}
		var bad []string
		g := NewGroupCommitter(func(batches [][]Op) error {
			mu.Lock()
			defer mu.Unlock()
			for _, ops := range batches {
				var n int
				fmt.Sscan(string(ops[0].Value), &n)
				k := string(ops[0].Key)
				if prev, ok := last[k]; ok && n != prev+1 {
					bad = append(bad, fmt.Sprintf("%s: %d after %d", k, n, prev))
				}
				last[k] = n
			}
			return nil
		}, inline)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var pending []<-chan error
				for n := range 2000 {
					// Not waiting for each result: order must hold anyway.
					pending = append(pending, g.Apply([]Op{{Bucket: Runs, Key: fmt.Appendf(nil, "w%d", w), Value: fmt.Append(nil, n)}}))
				}
				for _, ch := range pending {
					if err := <-ch; err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		g.Close()
		if len(bad) > 0 {
			t.Fatalf("inline %v: out of order: %v", inline, bad[:min(len(bad), 5)])
		}
		if len(last) != 8 {
			t.Fatalf("inline %v: %d writers committed, want 8", inline, len(last))
		}
	}
}

// An Apply that tries the inline path never waits for laterMu while it
// holds commitMu: a queued Apply holds laterMu while its send waits for
// room in the queue, which the writer makes only with commitMu. With the
// queue full the three waited for ever (TestGroupCommitterKeepsApplyOrder
// hung once in CI that way); this reproduces the first two without
// needing the race.
func TestGroupCommitterInlineLeavesCommitMuWhileWaiting(t *testing.T) {
	g := NewGroupCommitter(func([][]Op) error { return nil }, true)
	defer g.Close()
	g.laterMu.Lock() // as a queued Apply does while the queue is full
	res := make(chan (<-chan error), 1)
	go func() { res <- g.Apply([]Op{{Bucket: Runs, Key: []byte("a")}}) }()
	time.Sleep(50 * time.Millisecond) // the Apply has tried the inline path
	free := g.commitMu.TryLock()
	if free {
		g.commitMu.Unlock()
	}
	g.laterMu.Unlock()
	if !free {
		t.Error("an Apply waiting for laterMu holds commitMu: the writer cannot commit")
	}
	if err := <-<-res; err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Later's ops ride at the head of the next commit; alone, they are
// committed within laterWait; Close commits those still waiting.
func TestGroupCommitterLater(t *testing.T) {
	var mu sync.Mutex
	var commits [][]string
	rec := func(batches [][]Op) error {
		mu.Lock()
		defer mu.Unlock()
		var keys []string
		for _, ops := range batches {
			for _, op := range ops {
				keys = append(keys, string(op.Key))
			}
		}
		commits = append(commits, keys)
		return nil
	}
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(commits)
	}
	for _, inline := range []bool{true, false} {
		mu.Lock()
		commits = nil
		mu.Unlock()
		g := NewGroupCommitter(rec, inline)
		g.Later([]Op{{Bucket: Runs, Key: []byte("a")}})
		g.Later([]Op{{Bucket: Runs, Key: []byte("b")}})
		if err := <-g.Apply([]Op{{Bucket: Runs, Key: []byte("c")}}); err != nil {
			t.Fatal(err)
		}
		if got := seen(); got != "[[a b c]]" {
			t.Fatalf("inline %v: commits %s, want a, b and c in one", inline, got)
		}
		g.Later([]Op{{Bucket: Runs, Key: []byte("d")}})
		waitFor(t, func() bool { return seen() == "[[a b c] [d]]" })
		g.Later([]Op{{Bucket: Runs, Key: []byte("e")}})
		g.Close()
		if got := seen(); got != "[[a b c] [d] [e]]" {
			t.Fatalf("inline %v: after Close, commits %s", inline, got)
		}
		if n := g.Commits(); n != 3 {
			t.Fatalf("inline %v: Commits() = %d, want 3", inline, n)
		}
		g.Later([]Op{{Bucket: Runs, Key: []byte("f")}})
		if g.LastError() != ErrClosed {
			t.Fatalf("inline %v: Later after Close: last error %v", inline, g.LastError())
		}
	}
}

// A Later op no commit has taken yet can be cancelled, and is then never
// committed; one a commit took cannot.
func TestGroupCommitterCancelLater(t *testing.T) {
	var mu sync.Mutex
	var commits [][]string
	g := NewGroupCommitter(func(batches [][]Op) error {
		mu.Lock()
		defer mu.Unlock()
		var keys []string
		for _, ops := range batches {
			for _, op := range ops {
				keys = append(keys, string(op.Bucket)+"/"+string(op.Key))
			}
		}
		commits = append(commits, keys)
		return nil
	}, true)
	defer g.Close()
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(commits)
	}
	hold := func() { // no flush by the timer: the ops wait for a commit
		g.laterMu.Lock()
		g.laterTimer.Stop()
		g.laterMu.Unlock()
	}
	g.Later([]Op{{Bucket: Reservations, Key: []byte("a"), Value: []byte("1")}, {Bucket: Runs, Key: []byte("b")}})
	hold()
	if g.CancelLater(Runs, []byte("a")) {
		t.Fatal("cancelled a key of another bucket")
	}
	if !g.CancelLater(Reservations, []byte("a")) {
		t.Fatal("a queued Later op was not cancelled")
	}
	if g.CancelLater(Reservations, []byte("a")) {
		t.Fatal("cancelled twice")
	}
	if err := <-g.Apply([]Op{{Bucket: Runs, Key: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	if got := seen(); got != "[[runs/b runs/c]]" {
		t.Fatalf("commits %s, want b and c only", got)
	}
	g.Later([]Op{{Bucket: Reservations, Key: []byte("d")}})
	waitFor(t, func() bool { return seen() == "[[runs/b runs/c] [reservations/d]]" })
	if g.CancelLater(Reservations, []byte("d")) {
		t.Fatal("cancelled an op a commit had taken")
	}
}

// A goroutine's Later and Apply batches commit in the order it made them,
// whichever commit takes them, under contention (run with -race).
func TestGroupCommitterLaterKeepsOrder(t *testing.T) {
	for _, inline := range []bool{false, true} {
		var mu sync.Mutex
		last := map[string]int{}
		total := 0
		var bad []string
		g := NewGroupCommitter(func(batches [][]Op) error {
			mu.Lock()
			defer mu.Unlock()
			for _, ops := range batches {
				for _, op := range ops {
					var n int
					fmt.Sscan(string(op.Value), &n)
					k := string(op.Key)
					if prev, ok := last[k]; ok && n != prev+1 {
						bad = append(bad, fmt.Sprintf("%s: %d after %d", k, n, prev))
					}
					last[k] = n
					total++
				}
			}
			return nil
		}, inline)
		const writers, each = 8, 3000
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range each {
					op := []Op{{Bucket: Runs, Key: fmt.Appendf(nil, "w%d", w), Value: fmt.Append(nil, n)}}
					if n%3 == 0 {
						g.Later(op) // a call's reservation
						continue
					}
					if err := <-g.Apply(op); err != nil { // its end
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		g.Close()
		if len(bad) > 0 {
			t.Fatalf("inline %v: out of order: %v", inline, bad[:min(len(bad), 5)])
		}
		if total != writers*each {
			t.Fatalf("inline %v: %d ops committed, want %d", inline, total, writers*each)
		}
	}
}

// A CancelLater that takes the last Later op stops the flush timer: left
// armed, it would wake the process for nothing a millisecond later, once
// for nearly every call (whose hold is cancelled before it is written).
func TestCancelLaterStopsAnIdleTimer(t *testing.T) {
	g := NewGroupCommitter(func([][]Op) error { return nil }, true)
	defer g.Close()
	g.laterWait = time.Hour // armed for the length of the test
	g.Later([]Op{{Bucket: Reservations, Key: []byte("a"), Value: []byte("1")}, {Bucket: Reservations, Key: []byte("b"), Value: []byte("1")}})
	g.CancelLater(Reservations, []byte("a"))
	g.laterMu.Lock()
	armed := g.laterTimer.Stop()
	g.laterTimer.Reset(g.laterWait)
	g.laterMu.Unlock()
	if !armed {
		t.Fatal("the flush timer stopped with an op left to flush")
	}
	g.CancelLater(Reservations, []byte("b"))
	g.laterMu.Lock()
	defer g.laterMu.Unlock()
	if g.laterTimer.Stop() {
		t.Fatal("the flush timer is still armed with nothing to flush")
	}
}

// ApplyBehind returns while its commit is held up (an inline Apply would
// wait in it: the test would hang), its batch shares a commit of the
// writer's with what queued meanwhile, and an Apply after it commits
// after it.
func TestGroupCommitterApplyBehind(t *testing.T) {
	held := make(chan struct{})
	var mu sync.Mutex
	var commits [][]string
	g := NewGroupCommitter(func(batches [][]Op) error {
		<-held
		mu.Lock()
		defer mu.Unlock()
		var keys []string
		for _, ops := range batches {
			keys = append(keys, string(ops[0].Key))
		}
		commits = append(commits, keys)
		return nil
	}, true)
	defer g.Close()
	first := g.ApplyBehind([]Op{{Bucket: Runs, Key: []byte("a"), Value: []byte("1")}})
	second := g.ApplyBehind([]Op{{Bucket: Runs, Key: []byte("b"), Value: []byte("1")}})
	// With a batch queued, an Apply queues behind it instead of
	// committing inline.
	third := g.Apply([]Op{{Bucket: Runs, Key: []byte("c"), Value: []byte("1")}})
	close(held)
	for _, ch := range []<-chan error{first, second, third} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var order []string
	for _, c := range commits {
		order = append(order, c...)
	}
	if got := fmt.Sprint(order); got != "[a b c]" || len(commits) > 2 {
		t.Errorf("commits %v, want a, b and c in order, in at most two commits (the writer takes what queued while it waited)", commits)
	}
}
