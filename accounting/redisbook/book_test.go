package redisbook

import (
	"context"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/redis/go-redis/v9"
)

var (
	t0  = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx = context.Background()
)

func ensure(t testing.TB, b *Book, specs ...accounting.LedgerSpec) {
	t.Helper()
	if err := b.Ensure(ctx, specs, t0); err != nil {
		t.Fatal(err)
	}
}

func snapshot(t testing.TB, b *Book, key string, now time.Time) (limit, spent, reserved accounting.Vector) {
	t.Helper()
	limit, spent, reserved, err := b.Snapshot(ctx, key, now)
	if err != nil {
		t.Fatal(err)
	}
	return
}

func mustReserve(t testing.TB, b *Book, keys []string, want accounting.Vector, useFR bool, lease time.Duration, now time.Time) *accounting.Hold {
	t.Helper()
	h, sf, err := b.Reserve(ctx, keys, want, useFR, lease, now)
	if err != nil {
		t.Fatal(err)
	}
	if sf != nil {
		t.Fatalf("refused: %v", sf)
	}
	return h
}

func TestReserveSettleRelease(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	if !a.Shared() {
		t.Error("Shared() = false")
	}
	ensure(t, a,
		accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 10, Cost: 1000}, FinalReserve: accounting.Vector{Cost: 100}},
		accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: 5000}})
	want := accounting.Vector{Steps: 1, Tokens: 30, InputTokens: 20, OutputTokens: 10, Cost: 300}

	h := mustReserve(t, a, []string{"run", "team"}, want, false, time.Minute, t0)
	if h.ID == "" || h.Want != want || !h.Expires.Equal(t0.Add(time.Minute)) {
		t.Errorf("hold %+v", h)
	}
	// The other replica sees the reservation.
	if _, _, r := snapshot(t, b, "team", t0); r != want {
		t.Errorf("team reserved %+v, want %+v", r, want)
	}
	actual := accounting.Vector{Steps: 1, Tokens: 25, InputTokens: 20, OutputTokens: 5, Cost: 250}
	if err := b.Settle(ctx, h, actual, t0); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"run", "team"} {
		if _, s, r := snapshot(t, a, k, t0); s != actual || r != (accounting.Vector{}) {
			t.Errorf("%s: spent %+v reserved %+v", k, s, r)
		}
	}
	// Exactly once: a second Settle, or a Release after it, changes nothing.
	if err := a.Settle(ctx, h, actual, t0); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, s, r := snapshot(t, a, "run", t0); s != actual || r != (accounting.Vector{}) {
		t.Errorf("after repeat: spent %+v reserved %+v", s, r)
	}

	h2 := mustReserve(t, b, []string{"run"}, accounting.Vector{Cost: 400}, false, time.Minute, t0)
	if err := a.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	if err := a.Settle(ctx, h2, accounting.Vector{Cost: 400}, t0); err != nil { // after Release: no-op
		t.Fatal(err)
	}
	if _, s, r := snapshot(t, a, "run", t0); s.Cost != 250 || r != (accounting.Vector{}) {
		t.Errorf("after release: spent %+v reserved %+v", s, r)
	}
	// nil and empty holds are inert.
	if err := a.Settle(ctx, nil, actual, t0); err != nil {
		t.Error(err)
	}
	if err := a.Release(ctx, &accounting.Hold{}); err != nil {
		t.Error(err)
	}
}

func TestReserveRefusals(t *testing.T) {
	t.Parallel()
	a, _, _ := openPair(t)
	ensure(t, a,
		accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 3, Tokens: 1000, Cost: 1000}, FinalReserve: accounting.Vector{Cost: 100}},
		accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: 500}},
		accounting.LedgerSpec{Key: "none", Limit: accounting.Vector{ToolCalls: -1}},
	)
	mustReserve(t, a, []string{"run", "team"}, accounting.Vector{Steps: 1, Cost: 200}, false, time.Minute, t0)
	tests := []struct {
		name   string
		keys   []string
		want   accounting.Vector
		useFR  bool
		ledger string
		dim    string
		need   int64
		left   int64
	}{
		{"working budget", []string{"run"}, accounting.Vector{Cost: 701}, false, "run", accounting.DimCost, 701, 700},
		{"final reserve allowed", []string{"run"}, accounting.Vector{Cost: 800}, true, "", "", 0, 0},
		{"first ledger in caller order", []string{"team", "run"}, accounting.Vector{Cost: 900}, true, "team", accounting.DimCost, 900, 300},
		{"first dimension", []string{"run"}, accounting.Vector{Steps: 5, Tokens: 2000}, false, "run", accounting.DimSteps, 5, 2},
		{"tokens", []string{"run"}, accounting.Vector{Tokens: 2000}, false, "run", accounting.DimTokens, 2000, 1000},
		{"negative limit allows nothing", []string{"none"}, accounting.Vector{ToolCalls: 1}, false, "none", accounting.DimToolCalls, 1, 0},
		{"zero want always fits", []string{"none"}, accounting.Vector{Steps: 1}, false, "", "", 0, 0},
		{"unknown ledger ignored", []string{"nope", "team"}, accounting.Vector{Cost: 300}, false, "", "", 0, 0},
		{"negative want is zero", []string{"none"}, accounting.Vector{ToolCalls: -5}, false, "", "", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, sf, err := a.Reserve(ctx, tc.keys, tc.want, tc.useFR, time.Minute, t0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ledger == "" {
				if sf != nil {
					t.Fatalf("refused: %v", sf)
				}
				if err := a.Release(ctx, h); err != nil {
					t.Fatal(err)
				}
				return
			}
			if sf == nil {
				t.Fatal("accepted")
			}
			want := accounting.Shortfall{Ledger: tc.ledger, Dimension: tc.dim, Need: tc.need, Left: tc.left}
			if *sf != want {
				t.Errorf("shortfall %+v, want %+v", *sf, want)
			}
		})
	}
	// Refusals are all or nothing: nothing above was left reserved.
	if _, _, r := snapshot(t, a, "team", t0); r.Cost != 200 {
		t.Errorf("team reserved %d, want 200", r.Cost)
	}
	if _, _, r := snapshot(t, a, "none", t0); r != (accounting.Vector{}) {
		t.Errorf("none reserved %+v", r)
	}
}

func TestReserveDuplicateKeyCountsOnce(t *testing.T) {
	t.Parallel()
	a, _, _ := openPair(t)
	ensure(t, a, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Cost: 10}})
	h := mustReserve(t, a, []string{"run", "run", "run"}, accounting.Vector{Cost: 10}, false, time.Minute, t0)
	if _, _, r := snapshot(t, a, "run", t0); r.Cost != 10 {
		t.Errorf("reserved %d, want 10", r.Cost)
	}
	if err := a.Settle(ctx, h, accounting.Vector{Cost: 4}, t0); err != nil {
		t.Fatal(err)
	}
	if _, s, r := snapshot(t, a, "run", t0); s.Cost != 4 || r.Cost != 0 {
		t.Errorf("spent %d reserved %d", s.Cost, r.Cost)
	}
}

func TestEnsureSetLimitSnapshotHeadroom(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	spec := accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 5, Cost: 1000}, FinalReserve: accounting.Vector{Cost: 100, Steps: -3}}
	ensure(t, a, spec, spec)
	mustReserve(t, a, []string{"run"}, accounting.Vector{Steps: 1, Cost: 300}, false, time.Minute, t0)
	// Ensure again, from another replica with other limits: nothing changes.
	ensure(t, b, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Cost: 1}})
	lim, _, r := snapshot(t, b, "run", t0)
	if lim != spec.Limit || r.Cost != 300 {
		t.Errorf("limit %+v reserved %+v after a second Ensure", lim, r)
	}
	h, err := a.Headroom(ctx, []string{"run", "missing"}, false, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := accounting.Vector{Steps: 4, Tokens: math.MaxInt64, InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64, ToolCalls: math.MaxInt64, Cost: 600}
	if h != want {
		t.Errorf("headroom %+v, want %+v", h, want)
	}
	if h, _ := a.Headroom(ctx, []string{"run"}, true, t0); h.Cost != 700 {
		t.Errorf("headroom with final reserve %d, want 700", h.Cost)
	}
	if err := b.SetLimit(ctx, "run", accounting.Vector{Cost: 200}, accounting.Vector{}); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.Headroom(ctx, []string{"run"}, false, t0); h.Cost != 0 || h.Steps != math.MaxInt64 {
		t.Errorf("headroom after lowering the limit below reserved %+v, want cost 0", h)
	}
	if lim, _, r := snapshot(t, a, "run", t0); lim != (accounting.Vector{Cost: 200}) || r.Cost != 300 {
		t.Errorf("after SetLimit: limit %+v reserved %+v", lim, r)
	}
	// A missing ledger: SetLimit does not create it, Snapshot reads zero.
	if err := a.SetLimit(ctx, "ghost", accounting.Vector{Cost: 1}, accounting.Vector{}); err != nil {
		t.Fatal(err)
	}
	if lim, s, r := snapshot(t, a, "ghost", t0); lim != (accounting.Vector{}) || s != lim || r != lim {
		t.Errorf("ghost ledger %+v %+v %+v", lim, s, r)
	}
	if h, _ := a.Headroom(ctx, nil, false, t0); h.Cost != math.MaxInt64 {
		t.Errorf("headroom of nothing %+v", h)
	}
}

func TestWindowRoll(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	const period = 100 * time.Millisecond
	start := time.Unix(1_740_000_000, 0).UTC() // a multiple of the period
	at := func(d time.Duration) time.Time { return start.Add(d) }
	if err := a.Ensure(ctx, []accounting.LedgerSpec{{Key: "team", Limit: accounting.Vector{Cost: 100}, Period: period}}, at(30*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	h1 := mustReserve(t, a, []string{"team"}, accounting.Vector{Cost: 40}, false, time.Minute, at(40*time.Millisecond))
	if err := b.Settle(ctx, h1, accounting.Vector{Cost: 40}, at(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	open := mustReserve(t, b, []string{"team"}, accounting.Vector{Cost: 50}, false, time.Minute, at(60*time.Millisecond))
	if _, sf, _ := a.Reserve(ctx, []string{"team"}, accounting.Vector{Cost: 11}, false, time.Minute, at(99*time.Millisecond)); sf == nil {
		t.Fatal("window over its cap accepted a reservation")
	}
	// The next window: spent resets, the open reservation carries over.
	_, s, r := snapshot(t, a, "team", at(100*time.Millisecond))
	if s.Cost != 0 || r.Cost != 50 {
		t.Errorf("new window: spent %d reserved %d, want 0 and 50", s.Cost, r.Cost)
	}
	if hr, _ := a.Headroom(ctx, []string{"team"}, false, at(100*time.Millisecond)); hr.Cost != 50 {
		t.Errorf("new window headroom %d, want 50", hr.Cost)
	}
	h3 := mustReserve(t, a, []string{"team"}, accounting.Vector{Cost: 50}, false, time.Minute, at(120*time.Millisecond))
	// The call reserved in the previous window settles into this one.
	if err := a.Settle(ctx, open, accounting.Vector{Cost: 30}, at(150*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, s, r := snapshot(t, a, "team", at(150*time.Millisecond)); s.Cost != 30 || r.Cost != 50 {
		t.Errorf("after settle: spent %d reserved %d, want 30 and 50", s.Cost, r.Cost)
	}
	// Several periods later, settled into a window that starts on a boundary.
	if err := a.Settle(ctx, h3, accounting.Vector{Cost: 7}, at(730*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, s, r := snapshot(t, b, "team", at(799*time.Millisecond)); s.Cost != 7 || r.Cost != 0 {
		t.Errorf("window 7: spent %d reserved %d, want 7 and 0", s.Cost, r.Cost)
	}
	if _, s, _ := snapshot(t, b, "team", at(800*time.Millisecond)); s.Cost != 0 {
		t.Errorf("window 8: spent %d, want 0", s.Cost)
	}
}

// TestMoneyExact: a team cap of 50,000 USD is 5·10^16 pico-USD, past 2^53,
// where a double can no longer count single pico-dollars.
func TestMoneyExact(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	capUSD := 50_000 * accounting.USDUnit
	ensure(t, a, accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: capUSD}, FinalReserve: accounting.Vector{Cost: 1}})

	// Spend all but 3 pico-USD of the working budget, then 1 pico at a time.
	big := capUSD - 1 - 3
	h := mustReserve(t, a, []string{"team"}, accounting.Vector{Cost: big}, false, time.Minute, t0)
	if err := b.Settle(ctx, h, accounting.Vector{Cost: big}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h := mustReserve(t, b, []string{"team"}, accounting.Vector{Cost: 1}, false, time.Minute, t0)
		if i == 2 {
			// Keep the last one open: spent + reserved = the working limit.
			continue
		}
		if err := a.Settle(ctx, h, accounting.Vector{Cost: 1}, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, sf, err := a.Reserve(ctx, []string{"team"}, accounting.Vector{Cost: 1}, false, time.Minute, t0)
	if err != nil || sf == nil {
		t.Fatalf("one pico-USD past the working limit: sf %v err %v", sf, err)
	}
	if sf.Left != 0 || sf.Need != 1 {
		t.Errorf("shortfall %+v", sf)
	}
	_, s, r := snapshot(t, a, "team", t0)
	if s.Cost != capUSD-2 || r.Cost != 1 {
		t.Errorf("spent %d reserved %d, want %d and 1", s.Cost, r.Cost, capUSD-2)
	}
	if h, _ := a.Headroom(ctx, []string{"team"}, true, t0); h.Cost != 1 {
		t.Errorf("headroom with the final reserve %d, want 1", h.Cost)
	}
	mustReserve(t, a, []string{"team"}, accounting.Vector{Cost: 1}, true, time.Minute, t0)
	if _, sf, _ := a.Reserve(ctx, []string{"team"}, accounting.Vector{Cost: 1}, true, time.Minute, t0); sf == nil {
		t.Error("a pico-USD past the limit was accepted")
	}
	if _, s, r := snapshot(t, a, "team", t0); s.Cost+r.Cost != capUSD {
		t.Errorf("spent %d + reserved %d != cap %d", s.Cost, r.Cost, capUSD)
	}
}

// TestInt64Arithmetic drives the Lua limb arithmetic over the int64 range:
// values around 2^53, 10^9 boundaries, saturation at MaxInt64, negatives.
func TestInt64Arithmetic(t *testing.T) {
	t.Parallel()
	a, _, _ := openPair(t)
	tests := []struct {
		name        string
		limit, fr   int64
		spend       []int64 // settled one after another
		want        int64
		ok          bool
		spent, left int64
	}{
		{"2^53+1", 1<<53 + 2, 0, []int64{1 << 53}, 2, true, 1 << 53, 0},
		{"2^53+1 refused", 1<<53 + 2, 0, []int64{1<<53 + 1}, 2, false, 1<<53 + 1, 1},
		{"carry across 10^9", 3_000_000_000, 0, []int64{999_999_999, 1}, 2_000_000_000, true, 1_000_000_000, 0},
		{"borrow across 10^9", 2_000_000_001, 1_000_000_002, []int64{1}, 999_999_999, false, 1, 999_999_998},
		{"near MaxInt64", math.MaxInt64, 0, []int64{math.MaxInt64 - 5}, 5, true, math.MaxInt64 - 5, 0},
		{"spent saturates", math.MaxInt64, 0, []int64{math.MaxInt64 - 1, math.MaxInt64}, 1, false, math.MaxInt64, 0},
		{"negative limit", -1_000_000_000_000, 0, nil, 1, false, 0, 0},
		{"negative limit with reserve", math.MinInt64 + 1, 5, nil, 1, false, 0, 0},
		{"big reserve", 1 << 62, 1<<62 - 7, []int64{3}, 4, true, 3, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "l" + strconv.Itoa(i)
			ensure(t, a, accounting.LedgerSpec{Key: key, Limit: accounting.Vector{Tokens: tc.limit}, FinalReserve: accounting.Vector{Tokens: tc.fr}})
			for _, s := range tc.spend {
				h := mustReserve(t, a, []string{key}, accounting.Vector{}, false, time.Minute, t0)
				if err := a.Settle(ctx, h, accounting.Vector{Tokens: s}, t0); err != nil {
					t.Fatal(err)
				}
			}
			h, sf, err := a.Reserve(ctx, []string{key}, accounting.Vector{Tokens: tc.want}, false, time.Minute, t0)
			if err != nil {
				t.Fatal(err)
			}
			if (sf == nil) != tc.ok {
				t.Fatalf("ok = %v (%v), want %v", sf == nil, sf, tc.ok)
			}
			if sf != nil && sf.Left != tc.left {
				t.Errorf("left %d, want %d", sf.Left, tc.left)
			}
			_, s, r := snapshot(t, a, key, t0)
			if s.Tokens != tc.spent {
				t.Errorf("spent %d, want %d", s.Tokens, tc.spent)
			}
			if tc.ok {
				if r.Tokens != tc.want {
					t.Errorf("reserved %d, want %d", r.Tokens, tc.want)
				}
				if err := a.Release(ctx, h); err != nil {
					t.Fatal(err)
				}
				if _, _, r := snapshot(t, a, key, t0); r.Tokens != 0 {
					t.Errorf("reserved %d after release", r.Tokens)
				}
			}
		})
	}
}

func TestSweepAndLateSettle(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	ensure(t, a, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Cost: 1000}})
	abandoned := mustReserve(t, a, []string{"run"}, accounting.Vector{Cost: 100}, false, time.Second, t0)
	late := mustReserve(t, a, []string{"run"}, accounting.Vector{Cost: 200}, false, time.Second, t0)
	live := mustReserve(t, b, []string{"run"}, accounting.Vector{Cost: 300}, false, time.Hour, t0)
	released := mustReserve(t, b, []string{"run"}, accounting.Vector{Cost: 50}, false, time.Second, t0)
	if err := b.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Sweep(ctx, t0.Add(time.Second)); err != nil || n != 0 {
		t.Fatalf("sweep at the expiry: %d %v, want nothing (a lease ends after its expiry)", n, err)
	}
	// Both replicas sweep at once: each expired hold is released once.
	var wg sync.WaitGroup
	var total atomic.Int64
	for _, bk := range []*Book{a, b, a, b} {
		wg.Go(func() {
			n, err := bk.Sweep(ctx, t0.Add(2*time.Second))
			if err != nil {
				t.Error(err)
			}
			total.Add(int64(n))
		})
	}
	wg.Wait()
	if total.Load() != 2 {
		t.Errorf("swept %d holds, want 2", total.Load())
	}
	if _, s, r := snapshot(t, a, "run", t0); r.Cost != 300 || s.Cost != 0 {
		t.Errorf("after sweep: spent %d reserved %d, want 0 and 300 (the live hold)", s.Cost, r.Cost)
	}
	// Release after a sweep: nothing. Settle after a sweep: the spend is
	// booked, the reservation not returned twice; only once.
	if err := a.Release(ctx, abandoned); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Settle(ctx, late, accounting.Vector{Cost: 150}, t0.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, s, r := snapshot(t, a, "run", t0); r.Cost != 300 || s.Cost != 150 {
		t.Errorf("after late settle: spent %d reserved %d, want 150 and 300", s.Cost, r.Cost)
	}
	if err := a.Settle(ctx, live, accounting.Vector{Cost: 1}, t0); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.Sweep(ctx, t0.Add(48*time.Hour)); n != 0 {
		t.Errorf("swept %d after everything closed", n)
	}
}

func TestSweepBacklog(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	ensure(t, a, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 10_000}})
	const n = 2*sweepBatch + 17
	for range n {
		mustReserve(t, a, []string{"run"}, accounting.Vector{Steps: 1}, false, time.Millisecond, t0)
	}
	var wg sync.WaitGroup
	var total atomic.Int64
	for _, bk := range []*Book{a, b} {
		wg.Go(func() {
			k, err := bk.Sweep(ctx, t0.Add(time.Second))
			if err != nil {
				t.Error(err)
			}
			total.Add(int64(k))
		})
	}
	wg.Wait()
	if total.Load() != n {
		t.Errorf("swept %d, want %d", total.Load(), n)
	}
	if _, _, r := snapshot(t, a, "run", t0); r.Steps != 0 {
		t.Errorf("reserved %d steps after the sweep", r.Steps)
	}
}

// Concurrency, with two replicas (two Books, two clients) on one Redis.

func TestConcurrentReserveExact(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	price, _ := accounting.DefaultCatalog().Lookup("gpt-4o")
	worst := price.WorstCase(2000, 1000)
	ensure(t, a, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Cost: 10 * worst}})
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 100 {
		bk := []*Book{a, b}[i%2]
		wg.Go(func() {
			<-start
			_, sf, err := bk.Reserve(ctx, []string{"run"}, accounting.Vector{Steps: 1, Cost: worst}, true, time.Minute, t0)
			if err != nil {
				t.Error(err)
			}
			if sf == nil && err == nil {
				ok.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 10 {
		t.Errorf("%d reservations succeeded, want exactly 10", ok.Load())
	}
	if _, _, r := snapshot(t, a, "run", t0); r.Cost != 10*worst {
		t.Errorf("reserved %d, want %d", r.Cost, 10*worst)
	}
}

func TestConcurrentSharedTeam(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	const unit = 1000
	ensure(t, a,
		accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: 10 * unit}},
		accounting.LedgerSpec{Key: "run-a", Limit: accounting.Vector{Cost: 8 * unit}},
		accounting.LedgerSpec{Key: "run-b", Limit: accounting.Vector{Cost: 8 * unit}})
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 60 {
		run := []string{"run-a", "run-b"}[i%2]
		bk := []*Book{a, b}[(i/2)%2]
		wg.Go(func() {
			<-start
			keys := []string{run, "team"}
			if i%3 == 0 {
				keys = []string{"team", run}
			}
			_, sf, err := bk.Reserve(ctx, keys, accounting.Vector{Cost: unit}, true, time.Minute, t0)
			if err != nil {
				t.Error(err)
			}
			if sf == nil && err == nil {
				ok.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 10 {
		t.Errorf("%d reservations succeeded, want 10 (the team is the binding limit)", ok.Load())
	}
	_, _, ra := snapshot(t, a, "run-a", t0)
	_, _, rb := snapshot(t, a, "run-b", t0)
	_, _, rt := snapshot(t, a, "team", t0)
	if rt.Cost != 10*unit || ra.Cost+rb.Cost != rt.Cost || ra.Cost > 8*unit || rb.Cost > 8*unit {
		t.Errorf("reserved team=%d a=%d b=%d", rt.Cost, ra.Cost, rb.Cost)
	}
}

func TestConcurrentSettleReleaseOnce(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	ensure(t, a, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Cost: 1_000_000}})
	for range 60 {
		h := mustReserve(t, a, []string{"run"}, accounting.Vector{Cost: 10}, false, time.Nanosecond, t0)
		var wg sync.WaitGroup
		for k := range 6 {
			bk := []*Book{a, b}[k%2]
			wg.Go(func() {
				var err error
				switch k % 3 {
				case 0:
					err = bk.Settle(ctx, h, accounting.Vector{Cost: 7}, t0)
				case 1:
					err = bk.Release(ctx, h)
				case 2:
					_, err = bk.Sweep(ctx, t0.Add(time.Second))
				}
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	_, s, r := snapshot(t, a, "run", t0)
	if r != (accounting.Vector{}) {
		t.Errorf("reserved %+v, want nothing (returned exactly once)", r)
	}
	if s.Cost%7 != 0 || s.Cost > 60*7 {
		t.Errorf("spent %d: a settle counted twice", s.Cost)
	}
}

func TestConcurrentChurnNeverOverLimit(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	ensure(t, a,
		accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: 50, Steps: 40}, FinalReserve: accounting.Vector{Cost: 5, Steps: 4}},
		accounting.LedgerSpec{Key: "r1", Limit: accounting.Vector{Cost: 30}, FinalReserve: accounting.Vector{Cost: 3}},
		accounting.LedgerSpec{Key: "r2", Limit: accounting.Vector{Cost: 30}, FinalReserve: accounting.Vector{Cost: 3}},
	)
	stop := make(chan struct{})
	var checker sync.WaitGroup
	checker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, k := range []string{"team", "r1", "r2"} {
				lim, s, r := snapshot(t, b, k, t0)
				if s.Cost+r.Cost > lim.Cost-lim.Cost/10 || (lim.Steps > 0 && s.Steps+r.Steps > lim.Steps-lim.Steps/10) {
					t.Errorf("%s over its working limit: spent %+v reserved %+v", k, s, r)
					return
				}
			}
		}
	})
	var wg sync.WaitGroup
	var settled atomic.Int64
	for i := range 6 {
		bk := []*Book{a, b}[i%2]
		wg.Go(func() {
			for j := range 60 {
				run := []string{"r1", "r2"}[(i+j)%2]
				h, sf, err := bk.Reserve(ctx, []string{run, "team"}, accounting.Vector{Steps: 1, Cost: 2}, false, time.Millisecond, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if sf != nil {
					continue
				}
				switch j % 4 {
				case 0:
					err = bk.Release(ctx, h)
				case 1, 2:
					err = bk.Settle(ctx, h, accounting.Vector{}, t0)
					settled.Add(1)
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for range 30 {
			if _, err := b.Sweep(ctx, t0.Add(time.Second)); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if _, err := a.Sweep(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	close(stop)
	checker.Wait()
	for _, k := range []string{"team", "r1", "r2"} {
		if _, s, r := snapshot(t, a, k, t0); r != (accounting.Vector{}) || s != (accounting.Vector{}) {
			t.Errorf("%s: spent %+v reserved %+v, want nothing", k, s, r)
		}
	}
	if settled.Load() == 0 {
		t.Error("nothing was ever settled")
	}
}

func TestFinalReserveHonouredConcurrently(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	ensure(t, a, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Cost: 100}, FinalReserve: accounting.Vector{Cost: 10}})
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 120 {
		bk := []*Book{a, b}[i%2]
		wg.Go(func() {
			_, sf, err := bk.Reserve(ctx, []string{"run"}, accounting.Vector{Cost: 1}, false, time.Minute, t0)
			if err != nil {
				t.Error(err)
			}
			if sf == nil && err == nil {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 90 {
		t.Errorf("%d units given out of the working budget, want 90", ok.Load())
	}
	if h, _ := b.Headroom(ctx, []string{"run"}, false, t0); h.Cost != 0 {
		t.Errorf("working headroom %d, want 0", h.Cost)
	}
	if h, _ := b.Headroom(ctx, []string{"run"}, true, t0); h.Cost != 10 {
		t.Errorf("headroom with the final reserve %d, want 10", h.Cost)
	}
	mustReserve(t, b, []string{"run"}, accounting.Vector{Cost: 10}, true, time.Minute, t0)
}

// TestMatchesMemBook runs one random sequence of operations on MemBook and
// on the Redis book and compares every outcome: the in-process book is the
// reference for the rules.
func TestMatchesMemBook(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	mem := accounting.NewMemBook()
	rng := rand.New(rand.NewPCG(1, 2))
	const period = 10 * time.Second
	specs := []accounting.LedgerSpec{
		{Key: "run1", Limit: accounting.Vector{Steps: 30, Cost: 5000, Tokens: 9000}, FinalReserve: accounting.Vector{Steps: 2, Cost: 500}},
		{Key: "run2", Limit: accounting.Vector{Steps: 30, Cost: 4000, ToolCalls: 20}, FinalReserve: accounting.Vector{Cost: 400}},
		{Key: "team", Limit: accounting.Vector{Cost: 7000}, FinalReserve: accounting.Vector{Cost: 100}, Period: period},
	}
	now := t0
	for _, bk := range []accounting.Book{mem, a} {
		if err := bk.Ensure(ctx, specs, now); err != nil {
			t.Fatal(err)
		}
	}
	type pair struct{ m, r *accounting.Hold }
	var holds []pair
	keysets := [][]string{{"run1", "team"}, {"team", "run2"}, {"run1"}, {"run2", "team", "run2"}}
	for step := range 600 {
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		rb := []*Book{a, b}[rng.IntN(2)]
		switch op := rng.IntN(10); {
		case op < 4 || len(holds) == 0:
			keys := keysets[rng.IntN(len(keysets))]
			want := accounting.Vector{Steps: 1, Tokens: int64(rng.IntN(600)), ToolCalls: int64(rng.IntN(3)), Cost: accounting.Money(rng.IntN(900))}
			useFR := rng.IntN(5) == 0
			lease := time.Duration(1+rng.IntN(5)) * time.Second
			hm, sm, _ := mem.Reserve(ctx, keys, want, useFR, lease, now)
			hr, sr, err := rb.Reserve(ctx, keys, want, useFR, lease, now)
			if err != nil {
				t.Fatal(err)
			}
			if (sm == nil) != (sr == nil) || (sm != nil && *sm != *sr) {
				t.Fatalf("step %d reserve %v %+v: mem %+v, redis %+v", step, keys, want, sm, sr)
			}
			if hm != nil {
				holds = append(holds, pair{hm, hr})
			}
		case op < 7:
			i := rng.IntN(len(holds))
			p := holds[i]
			actual := p.m.Want
			actual.Cost = accounting.Money(rng.IntN(1200))
			if err := mem.Settle(ctx, p.m, actual, now); err != nil {
				t.Fatal(err)
			}
			if err := rb.Settle(ctx, p.r, actual, now); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) > 0 {
				holds = append(holds[:i], holds[i+1:]...)
			}
		case op < 8:
			i := rng.IntN(len(holds))
			p := holds[i]
			mem.Release(ctx, p.m)
			if err := rb.Release(ctx, p.r); err != nil {
				t.Fatal(err)
			}
		default:
			nm, _ := mem.Sweep(ctx, now)
			nr, err := rb.Sweep(ctx, now)
			if err != nil {
				t.Fatal(err)
			}
			if nm != nr {
				t.Fatalf("step %d: mem swept %d, redis %d", step, nm, nr)
			}
		}
		for _, s := range specs {
			lm, sm, rm, _ := mem.Snapshot(ctx, s.Key, now)
			lr, sr, rr := snapshot(t, b, s.Key, now)
			if lm != lr || sm != sr || rm != rr {
				t.Fatalf("step %d ledger %s:\nmem   %+v %+v %+v\nredis %+v %+v %+v", step, s.Key, lm, sm, rm, lr, sr, rr)
			}
		}
		for _, keys := range keysets {
			for _, fr := range []bool{false, true} {
				hm, _ := mem.Headroom(ctx, keys, fr, now)
				hr, err := a.Headroom(ctx, keys, fr, now)
				if err != nil || hm != hr {
					t.Fatalf("step %d headroom %v %v: mem %+v redis %+v (%v)", step, keys, fr, hm, hr, err)
				}
			}
		}
	}
}

// Forget deletes the ledgers named, and only them: a later Ensure starts
// one afresh, another replica no longer sees it.
func TestForget(t *testing.T) {
	t.Parallel()
	a, b, _ := openPair(t)
	ensure(t, a,
		accounting.LedgerSpec{Key: "run:old", Limit: accounting.Vector{Steps: 10}},
		accounting.LedgerSpec{Key: "run:new", Limit: accounting.Vector{Steps: 10}})
	for _, key := range []string{"run:old", "run:new"} {
		h := mustReserve(t, a, []string{key}, accounting.Vector{Steps: 1}, false, time.Minute, t0)
		if err := a.Settle(ctx, h, accounting.Vector{Steps: 1}, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Forget(ctx, []string{"run:old", "run:never"}); err != nil {
		t.Fatal(err)
	}
	if limit, spent, _ := snapshot(t, b, "run:old", t0); !limit.IsZero() || !spent.IsZero() {
		t.Fatalf("forgotten ledger still read: limit %+v spent %+v", limit, spent)
	}
	if _, spent, _ := snapshot(t, b, "run:new", t0); spent.Steps != 1 {
		t.Fatalf("the other ledger: spent %+v", spent)
	}
	ensure(t, b, accounting.LedgerSpec{Key: "run:old", Limit: accounting.Vector{Steps: 3}})
	if limit, spent, _ := snapshot(t, a, "run:old", t0); limit.Steps != 3 || spent.Steps != 0 {
		t.Fatalf("ensured again: limit %+v spent %+v", limit, spent)
	}
	if err := a.Forget(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// SettleHeadroom books what Settle books, once, and answers what Headroom
// reads after it — also when the server lost its scripts, where the
// pipelined EVALSHA fails and nothing may be settled twice. Not parallel:
// the flush of the server's scripts would cost the tests running beside it
// round trips (TestRedisCallRoundTrips counts them).
func TestSettleHeadroomIsSettleThenHeadroom(t *testing.T) {
	a, b, _ := openPair(t)
	keys := runAndTeam(t, a)
	actual := accounting.Vector{Steps: 1, Tokens: 700, Cost: 250}
	for _, flush := range []bool{false, true} {
		h := mustReserve(t, a, keys[:2], accounting.Vector{Steps: 1, Tokens: 1000, Cost: 400}, false, time.Minute, t0)
		if flush {
			if err := a.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, read, err := a.SettleHeadroom(ctx, h, actual, t0, keys, true)
		if err != nil || !read {
			t.Fatalf("flush=%v: %v, read %v", flush, err, read)
		}
		want, err := b.Headroom(ctx, keys, true, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("flush=%v: headroom %+v, Headroom reads %+v", flush, got, want)
		}
		// Settled once: a second settlement of the hold books nothing.
		if err := b.Settle(ctx, h, actual, t0); err != nil {
			t.Fatal(err)
		}
		again, _ := b.Headroom(ctx, keys, true, t0)
		if again != want {
			t.Errorf("flush=%v: a second settlement changed the headroom: %+v, then %+v", flush, want, again)
		}
	}
	_, spent, reserved := snapshot(t, b, "run", t0)
	if spent.Cost != 500 || spent.Steps != 2 || reserved != (accounting.Vector{}) {
		t.Errorf("run ledger spent %+v reserved %+v, want two settlements of %+v", spent, reserved, actual)
	}
}

// ReserveHeadroom holds what Reserve holds, or reports the same shortfall,
// and answers what Headroom reads after it, with the scripts flushed too.
// Not parallel, as TestSettleHeadroomIsSettleThenHeadroom.
func TestReserveHeadroomIsReserveThenHeadroom(t *testing.T) {
	a, b, _ := openPair(t)
	keys := runAndTeam(t, a)
	want := accounting.Vector{Steps: 1, Tokens: 1000, Cost: 400}
	for _, flush := range []bool{false, true} {
		if flush {
			if err := a.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		h, short, got, read, err := a.ReserveHeadroom(ctx, keys, want, false, time.Minute, t0, true)
		if err != nil || short != nil || h == nil || !read {
			t.Fatalf("flush=%v: hold %v short %v read %v: %v", flush, h, short, read, err)
		}
		head, err := b.Headroom(ctx, keys, true, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got != head {
			t.Errorf("flush=%v: headroom %+v, Headroom reads %+v", flush, got, head)
		}
	}
	_, _, reserved := snapshot(t, b, "run", t0)
	if reserved.Cost != 800 || reserved.Steps != 2 {
		t.Errorf("run ledger reserved %+v, want two holds of %+v", reserved, want)
	}
	// 200 of cost left above the final reserve: the next one is short.
	_, short, _, _, err := a.ReserveHeadroom(ctx, keys, want, false, time.Minute, t0, true)
	_, short2, err2 := b.Reserve(ctx, keys, want, false, time.Minute, t0)
	if err != nil || err2 != nil || short == nil || short2 == nil || *short != *short2 {
		t.Fatalf("shortfall %+v (%v), Reserve's %+v (%v)", short, err, short2, err2)
	}
}

// EnsureRead makes what Ensure makes and reads the ledger as Snapshot
// does, an existing ledger keeping its state; with the scripts flushed too.
// Not parallel, as TestSettleHeadroomIsSettleThenHeadroom.
func TestEnsureReadIsEnsureThenSnapshot(t *testing.T) {
	a, b, _ := openPair(t)
	spec := accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 10, Cost: 1000}}
	team := accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Tokens: 5000}}
	for _, flush := range []bool{false, true} {
		if flush {
			mustReserve(t, a, []string{"run"}, accounting.Vector{Steps: 1, Cost: 300}, false, time.Minute, t0)
			if err := a.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := a.EnsureRead(ctx, []accounting.LedgerSpec{spec, team}, t0, "run")
		if err != nil || got == nil {
			t.Fatalf("flush=%v: %+v, %v", flush, got, err)
		}
		lim, spent, reserved := snapshot(t, b, "run", t0)
		if want := (accounting.LedgerSnapshot{Limit: lim, Spent: spent, Reserved: reserved}); *got != want {
			t.Errorf("flush=%v: read %+v, Snapshot %+v", flush, *got, want)
		}
		if flush && reserved.Cost != 300 {
			t.Errorf("an existing ledger lost its state: reserved %+v", reserved)
		}
		if lim, _, _ := snapshot(t, b, "team", t0); lim != team.Limit {
			t.Errorf("flush=%v: team ledger limit %+v", flush, lim)
		}
	}
	if got, err := a.EnsureRead(ctx, []accounting.LedgerSpec{spec}, t0, "missing"); err != nil || got != nil {
		t.Errorf("a ledger not made: %+v, %v", got, err)
	}
}

// ReserveEnsuring makes the ledgers ahead of the reservation, in its
// round trip: the reservation is checked against them (a ledger not made
// yet would be ignored), an existing ledger keeps its state, and so with
// the scripts flushed too (the reservation then goes again; the ensure
// must not be skipped). Not parallel, as TestSettleHeadroomIsSettleThenHeadroom.
func TestReserveEnsuringMakesLedgersFirst(t *testing.T) {
	a, b, _ := openPair(t)
	spec := accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 10, Cost: 1000}}
	// The reservation script loaded, so that it runs in the pipeline.
	mustReserve(t, a, []string{"none"}, accounting.Vector{Steps: 1}, false, time.Minute, t0)
	for _, flush := range []bool{false, true} {
		if flush {
			if err := a.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// More than the limit: refused only when the ledger was made first.
		h, short, _, _, err := a.ReserveEnsuring(ctx, []accounting.LedgerSpec{spec}, t0, []string{"run"},
			accounting.Vector{Steps: 1, Cost: 1500}, false, time.Minute, t0, false, false)
		if err != nil || short == nil || h != nil {
			t.Fatalf("flush=%v: hold %v short %v: %v; want the made ledger's shortfall", flush, h, short, err)
		}
		want := accounting.Vector{Steps: 1, Cost: 600}
		h, short, head, read, err := a.ReserveEnsuring(ctx, []accounting.LedgerSpec{spec}, t0, []string{"run"}, want, false, time.Minute, t0, true, false)
		if err != nil || short != nil || h == nil || !read {
			t.Fatalf("flush=%v: hold %v short %v read %v: %v", flush, h, short, read, err)
		}
		if got, _ := b.Headroom(ctx, []string{"run"}, false, t0); got != head {
			t.Errorf("flush=%v: headroom %+v, Headroom reads %+v", flush, head, got)
		}
		lim, _, reserved := snapshot(t, b, "run", t0)
		if lim != spec.Limit || reserved != want {
			t.Errorf("flush=%v: ledger limit %+v reserved %+v, want %+v and %+v", flush, lim, reserved, spec.Limit, want)
		}
		if err := a.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
}

// runAndTeam makes a run ledger (cost, with a final reserve, and steps)
// and a team ledger (tokens) and returns their keys with one that does not
// exist.
func runAndTeam(t *testing.T, b *Book) []string {
	t.Helper()
	ensure(t, b, accounting.LedgerSpec{Key: "run", Limit: accounting.Vector{Steps: 10, Cost: 1000}, FinalReserve: accounting.Vector{Cost: 100}},
		accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Tokens: 5000}})
	return []string{"run", "team", "missing"}
}

// TestInt64LuaMatchesGo holds the scripts' decimal arithmetic (int64Lua)
// to Go's int64 over the values where its paths meet: a value printed
// back as it was read (fmt takes a shorter path below 9·10^15 in
// magnitude), saturating sums, and differences floored at 0, for the
// boundaries and for random values of every magnitude.
func TestInt64LuaMatchesGo(t *testing.T) {
	t.Parallel()
	a, _, _ := openPair(t)
	vals := []int64{0, 1, -1, 999_999_999, 1_000_000_000, -999_999_999, -1_000_000_000, -1_000_000_001,
		8_999_999_999_999_999, 9_000_000_000_000_000, 9_000_000_000_000_001, -8_999_999_999_999_999,
		-9_000_000_000_000_000, -9_000_000_000_000_001, 8_999_999_000_000_000, -8_999_999_000_000_000,
		1 << 53, 1<<53 + 1, -(1 << 53) - 1, 999_999_999_999_999, 1_000_000_000_000_000,
		math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 400 {
		v := rng.Int64() >> rng.IntN(63)
		if rng.IntN(2) == 0 {
			v = -v
		}
		vals = append(vals, v)
	}
	script := redis.NewScript(int64Lua + `
local out = {}
for i = 1, #ARGV, 2 do
  local ah, al = parse(ARGV[i])
  local bh, bl = parse(ARGV[i + 1])
  out[#out + 1] = fmt(ah, al)
  out[#out + 1] = fmt(clamp(add(ah, al, bh, bl)))
  out[#out + 1] = fmt(nonneg(sub(ah, al, bh, bl)))
end
return out`)
	var args []any
	var want []string
	for i, x := range vals {
		y := vals[(i*7+3)%len(vals)]
		args = append(args, strconv.FormatInt(x, 10), strconv.FormatInt(y, 10))
		bx, by := big.NewInt(x), big.NewInt(y)
		sum := new(big.Int).Add(bx, by)
		if sum.IsInt64() {
			want = append(want, strconv.FormatInt(x, 10), sum.String())
		} else if sum.Sign() > 0 {
			want = append(want, strconv.FormatInt(x, 10), strconv.FormatInt(math.MaxInt64, 10))
		} else {
			want = append(want, strconv.FormatInt(x, 10), strconv.FormatInt(math.MinInt64, 10))
		}
		// A difference is not clamped (the limbs hold it), only floored.
		diff := new(big.Int).Sub(bx, by)
		if diff.Sign() < 0 {
			diff.SetInt64(0)
		}
		want = append(want, diff.String())
	}
	got, err := script.Run(ctx, a.rdb, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			x, y := args[i/3*2], args[i/3*2+1]
			t.Errorf("%s, %s: %s is %s, want %s", x, y, []string{"read back", "sum", "difference"}[i%3], got[i], want[i])
		}
	}
}
