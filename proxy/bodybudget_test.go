package proxy

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBodyBudget(t *testing.T) {
	t.Parallel()
	b := newBodyBudget(100)
	if n, ok := b.acquire(60, time.Millisecond); !ok || n != 60 {
		t.Fatalf("acquire 60 of 100: %d %v", n, ok)
	}
	if _, ok := b.acquire(50, 20*time.Millisecond); ok {
		t.Fatal("50 more fit in 40")
	}
	if n, ok := b.acquire(40, time.Millisecond); !ok || n != 40 {
		t.Fatalf("acquire the last 40: %d %v", n, ok)
	}
	// A waiter is woken by a release, well before its wait ends.
	got := make(chan bool)
	go func() { _, ok := b.acquire(30, time.Minute); got <- ok }()
	time.Sleep(10 * time.Millisecond)
	b.release(40)
	if !<-got {
		t.Fatal("a release did not let the waiter in")
	}
	// A body larger than the whole budget takes all of it, once it is free.
	go func() { n, ok := b.acquire(1000, time.Minute); got <- ok && n == 100 }()
	time.Sleep(10 * time.Millisecond)
	b.release(60)
	b.release(30)
	if !<-got {
		t.Fatal("an oversized body did not take the whole budget")
	}
	if u := b.used.Load(); u != 100 {
		t.Fatalf("used %d, want 100", u)
	}
	var none *bodyBudget
	if n, ok := none.acquire(1<<40, 0); !ok || n != 0 {
		t.Fatal("no budget refused a body")
	}
	none.release(5)
}

// Many callers taking and giving back random sizes never hold more than the
// budget together, and all of it is back at the end.
func TestBodyBudgetUnderContention(t *testing.T) {
	t.Parallel()
	const max = 1000
	b := newBodyBudget(max)
	var held, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 2000 {
				n, ok := b.acquire(1+r.Int64N(400), time.Duration(r.IntN(200))*time.Microsecond)
				if !ok {
					refused.Add(1)
					continue
				}
				if h := held.Add(n); h > max {
					t.Errorf("%d bytes held at once, budget %d", h, max)
				}
				time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
				held.Add(-n)
				b.release(n)
			}
		}()
	}
	wg.Wait()
	if u := b.used.Load(); u != 0 {
		t.Fatalf("%d bytes still taken", u)
	}
	if r := refused.Load(); r == 0 || r == 32000 {
		t.Fatalf("%d of 32000 refused: the test did not make callers wait", r)
	}
}
