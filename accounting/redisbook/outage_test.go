//go:build unix

package redisbook

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/redisstore"
	"github.com/haltline/haltline/store/redisstore/redistest"
)

// failFast is how long a call may take to fail while Redis is down: the
// client's socket timeouts (1 s) with one retry, and some slack.
const failFast = 2500 * time.Millisecond

// TestRedisOutage runs its own redis-server with an fsynced append-only
// file, kills it in the middle, and starts it again on the same port: calls
// fail promptly while it is down and work again afterwards, with the
// ledgers, holds and records intact, without reopening anything.
func TestRedisOutage(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("REDIS_URL") != "" {
			t.Skip("TestRedisOutage kills and restarts its own redis-server, which is not installed (REDIS_URL only serves the other tests)")
		}
		t.Fatal("redis-server is not installed:", err)
	}
	srv, err := redistest.Start(t.TempDir(), redistest.FreePort(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	s, err := redisstore.Open(srv.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := New(s.Client(), "")

	ensure(t, b, accounting.LedgerSpec{Key: "team", Limit: accounting.Vector{Cost: 50_000 * accounting.USDUnit}})
	h := mustReserve(t, b, []string{"team"}, accounting.Vector{Cost: 3 * accounting.USDUnit}, false, time.Hour, t0)
	if err := b.Settle(ctx, h, accounting.Vector{Cost: 2*accounting.USDUnit + 1}, t0); err != nil {
		t.Fatal(err)
	}
	open := mustReserve(t, b, []string{"team"}, accounting.Vector{Cost: 5}, false, time.Hour, t0)
	if err := <-s.Apply([]store.Op{{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("v1")}}); err != nil {
		t.Fatal(err)
	}

	calls := []struct {
		name string
		call func() error
	}{
		{"Reserve", func() error {
			_, _, err := b.Reserve(ctx, []string{"team"}, accounting.Vector{Cost: 1}, false, time.Hour, t0)
			return err
		}},
		{"Settle", func() error { return b.Settle(ctx, open, accounting.Vector{Cost: 1}, t0) }},
		{"Release", func() error { return b.Release(ctx, open) }},
		{"Sweep", func() error { _, err := b.Sweep(ctx, t0); return err }},
		{"Headroom", func() error { _, err := b.Headroom(ctx, []string{"team"}, false, t0); return err }},
		{"Snapshot", func() error { _, _, _, err := b.Snapshot(ctx, "team", t0); return err }},
		{"Ensure", func() error { return b.Ensure(ctx, []accounting.LedgerSpec{{Key: "x"}}, t0) }},
		{"SetLimit", func() error { return b.SetLimit(ctx, "team", accounting.Vector{}, accounting.Vector{}) }},
		{"Apply", func() error {
			return <-s.Apply([]store.Op{{Bucket: store.Runs, Key: []byte("r2"), Value: []byte("v2")}})
		}},
		{"Get", func() error { _, err := s.Get(store.Runs, []byte("r1")); return err }},
		{"Scan", func() error { return s.Scan(store.Runs, func(k, v []byte) error { return nil }) }},
		{"Healthy", s.Healthy},
	}
	// expectDown runs every call at once (as a busy gateway would) and wants
	// each to fail within failFast.
	expectDown := func(phase string, which func(string) bool) {
		t.Helper()
		var wg sync.WaitGroup
		for _, c := range calls {
			if !which(c.name) {
				continue
			}
			wg.Go(func() {
				start := time.Now()
				err := c.call()
				d := time.Since(start)
				t.Logf("%s, Redis %s: %v: %v", c.name, phase, d.Round(time.Millisecond), err)
				if err == nil || d > failFast {
					t.Errorf("%s with Redis %s: err %v after %v, want an error within %v", c.name, phase, err, d, failFast)
				}
			})
		}
		wg.Wait()
	}

	// A stalled server (SIGSTOP) answers nothing: the read timeouts bound
	// the calls. Only reads here, so that nothing is left to apply when it
	// resumes.
	if err := srv.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	expectDown("stalled", func(n string) bool { return n == "Headroom" || n == "Get" || n == "Healthy" })
	if err := srv.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	expectDown("killed", func(string) bool { return true })
	expectDown("killed (again)", func(string) bool { return true })

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The same Book and Store work again: go-redis redials by itself (its
	// dial-error backoff probes about once a second).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := b.Headroom(ctx, []string{"team"}, false, t0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis is back but calls still fail: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, spent, reserved := snapshot(t, b, "team", t0)
	if spent.Cost != 2*accounting.USDUnit+1 || reserved.Cost != 5 {
		t.Errorf("after restart: spent %d reserved %d, want %d and 5", spent.Cost, reserved.Cost, 2*accounting.USDUnit+1)
	}
	// The hold taken before the crash settles exactly once.
	if err := b.Settle(ctx, open, accounting.Vector{Cost: 4}, t0); err != nil {
		t.Fatal(err)
	}
	_, spent, reserved = snapshot(t, b, "team", t0)
	if spent.Cost != 2*accounting.USDUnit+5 || reserved.Cost != 0 {
		t.Errorf("after settle: spent %d reserved %d", spent.Cost, reserved.Cost)
	}
	mustReserve(t, b, []string{"team"}, accounting.Vector{Cost: 1}, false, time.Hour, t0)
	if v, err := s.Get(store.Runs, []byte("r1")); err != nil || string(v) != "v1" {
		t.Errorf("record after restart: %q %v", v, err)
	}
	if err := <-s.Apply([]store.Op{{Bucket: store.Runs, Key: []byte("r3"), Value: []byte("v3")}}); err != nil {
		t.Errorf("Apply after restart: %v", err)
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("Healthy after restart: %v", err)
	}
}
