package redisstore

import (
	"context"
	"testing"

	"github.com/haltline/haltline/store"
)

// A guarded write is applied only while the run's stored snapshot is the
// one the writer names and nobody holds the run's lock; otherwise nothing
// of it is written.
func TestApplyGuarded(t *testing.T) {
	t.Parallel()
	rs := openReplicas(t, 2)
	a, b := rs[0], rs[1]
	ctx := context.Background()
	v1 := []byte(`{"version":1}`)
	// Loaded: a server that lacks it applies nothing (a test before may
	// have flushed the scripts).
	if err := guardedScript.Load(ctx, a.Client()).Err(); err != nil {
		t.Fatal(err)
	}
	// A new run: written only while none is stored.
	if ok, err := a.ApplyGuarded(ctx, "r1", "", []store.Op{{Bucket: store.Runs, Key: []byte("r1"), Value: v1}}, nil, nil); err != nil || !ok {
		t.Fatalf("a new run: applied %v, %v", ok, err)
	}
	if ok, err := a.ApplyGuarded(ctx, "r1", "", []store.Op{{Bucket: store.Runs, Key: []byte("r1"), Value: []byte("{}")}}, nil, nil); err != nil || ok {
		t.Fatalf("a new run over a stored one: applied %v, %v", ok, err)
	}
	get := func(bk store.Bucket, k string) string {
		t.Helper()
		v, err := b.Get(bk, []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	v2 := []byte(`{"version":2}`)
	ops := []store.Op{
		{Bucket: store.Events, Key: []byte("r1-1"), Value: []byte("e")},
		{Bucket: store.Unfinished, Key: []byte("r1")},
		{Bucket: store.Runs, Key: []byte("r1"), Value: v2},
	}
	commit(t, a, store.Op{Bucket: store.Unfinished, Key: []byte("r1"), Value: []byte("1")})
	// A stamp of another snapshot: nothing written.
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp([]byte(`{"version":0}`)), ops, nil, nil); err != nil || ok {
		t.Fatalf("stale stamp: applied %v, %v", ok, err)
	}
	if got := get(store.Runs, "r1"); got != string(v1) || get(store.Events, "r1-1") != "" || get(store.Unfinished, "r1") != "1" {
		t.Fatalf("a failed guard wrote: run %s", got)
	}
	// The lock held by another replica: nothing written.
	unlock, err := b.Lock(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp(v1), ops, nil, nil); err != nil || ok {
		t.Fatalf("lock held: applied %v, %v", ok, err)
	}
	if got := get(store.Runs, "r1"); got != string(v1) {
		t.Fatalf("a write under another's lock: run %s", got)
	}
	unlock()
	// A condition that does not hold: nothing written.
	if err := a.Client().HSet(ctx, "cond-"+t.Name(), "f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Client().Del(ctx, "cond-"+t.Name()) })
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp(v1), ops, [][3]string{{"cond-" + t.Name(), "f", "2"}}, nil); err != nil || ok {
		t.Fatalf("condition not held: applied %v, %v", ok, err)
	}
	if got := get(store.Runs, "r1"); got != string(v1) {
		t.Fatalf("a write whose condition did not hold: run %s", got)
	}
	// The snapshot held, no lock, the condition holds: every op applied.
	ops = append(ops, store.Op{Bucket: store.Lineage, Key: []byte("k"), Value: []byte("r1")})
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp(v1), ops, [][3]string{{"cond-" + t.Name(), "f", "1"}}, nil); err != nil || !ok {
		t.Fatalf("guard held: applied %v, %v", ok, err)
	}
	if get(store.Lineage, "k") != "r1" {
		t.Fatal("the last op of a guarded write was not applied")
	}
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp(v1), ops, nil, nil); err != nil || !ok {
		t.Fatalf("guard held: applied %v, %v", ok, err)
	}
	if get(store.Runs, "r1") != string(v2) || get(store.Events, "r1-1") != "e" || get(store.Unfinished, "r1") != "" {
		t.Fatal("a guarded write was not applied whole")
	}
	var keys []string
	if err := b.Scan(store.Events, func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil || len(keys) != 1 {
		t.Fatalf("the key index: %v %v", keys, err)
	}
	// The same write again (a pipeline sent again after a lost reply):
	// found applied.
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp(v1), ops, nil, nil); err != nil || !ok {
		t.Fatalf("the same write again: applied %v, %v", ok, err)
	}
	// Another write on the old stamp: the run moved on, the guard fails.
	other := []store.Op{{Bucket: store.Runs, Key: []byte("r1"), Value: []byte(`{"version":3}`)}}
	if ok, err := a.ApplyGuarded(ctx, "r1", store.Stamp(v1), other, nil, nil); err != nil || ok {
		t.Fatalf("a second write on the old stamp: applied %v, %v", ok, err)
	}
	if got := get(store.Runs, "r1"); got != string(v2) {
		t.Fatalf("a write on the old stamp was applied: run %s", got)
	}
}
