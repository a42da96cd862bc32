package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/store"
)

// bucketReads counts a store's scans by bucket and its reads of snapshots.
type bucketReads struct {
	store.Store
	mu       sync.Mutex
	scans    map[store.Bucket]int
	runReads int
}

func (c *bucketReads) Scan(b store.Bucket, fn func(k, v []byte) error) error {
	c.mu.Lock()
	c.scans[b]++
	c.mu.Unlock()
	return c.Store.Scan(b, fn)
}

func (c *bucketReads) Get(b store.Bucket, key []byte) ([]byte, error) {
	if b == store.Runs {
		c.mu.Lock()
		c.runReads++
		c.mu.Unlock()
	}
	return c.Store.Get(b, key)
}

func (c *bucketReads) GetMany(b store.Bucket, keys [][]byte, fn func(int, []byte) error) error {
	if b == store.Runs {
		c.mu.Lock()
		c.runReads += len(keys)
		c.mu.Unlock()
	}
	return c.Store.GetMany(b, keys, fn)
}

// reset returns the counts so far and starts again.
func (c *bucketReads) reset() (map[store.Bucket]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	scans, reads := c.scans, c.runReads
	c.scans, c.runReads = map[store.Bucket]int{}, 0
	return scans, reads
}

// The retention sweep finds what expires through the store's index of runs
// by their end, and a run's lineage keys through the list of keys it
// wrote: once the index is complete, a sweep reads neither every snapshot
// nor every lineage key, ticket or blob. A run begun before the list was
// kept has its keys found by reading those buckets; the first
// sweep of a store without the index reads every snapshot once and
// completes it. A lineage key another run wrote since stays.
func TestRetentionSweepReadsWhatExpired(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clock := start
	now := func() time.Time { return clock }
	bolt := openBolt(t, t.TempDir())
	st := &bucketReads{Store: bolt, scans: map[store.Bucket]int{}}
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now, StoreRetention: 24 * time.Hour})
	present := func(b store.Bucket, key string) string {
		t.Helper()
		v, err := bolt.Get(b, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	// A run of one tool step (its own lineage key, tc:call_<run>) and a
	// final answer (the key of its text's hash, which every such run
	// shares, points at the last run that wrote it).
	run := func(id string) {
		t.Helper()
		step(p, &pipeline.Call{Body: taskBody, RunID: id}, strings.Replace(toolResponse, "call_x", "call_"+id, 1))
		step(p, &pipeline.Call{Body: taskBody, RunID: id}, finalResponse)
		if present(store.Lineage, "tc:call_"+id) != id {
			t.Fatalf("setup: %s's lineage key not stored", id)
		}
	}
	leave := func() {
		clock = clock.Add(time.Minute)
		p.SweepEnded()
	}

	// A run of a version that did not list its keys: its snapshot without
	// owns_all, its entry by its end without them (a short run's keys are
	// there: endOp).
	run("r-legacy")
	leave()
	v, _ := bolt.Get(store.Runs, []byte("r-legacy"))
	legacy := []store.Op{{Bucket: store.Runs, Key: []byte("r-legacy"), Value: bytes.Replace(v, []byte(`,"owns_all":true`), nil, 1)}}
	if err := bolt.Scan(store.Ended, func(k, v []byte) error {
		if string(k[8:]) == "r-legacy" && bytes.Contains(v, []byte("tc:call_r-legacy")) {
			legacy = append(legacy, store.Op{Bucket: store.Ended, Key: bytes.Clone(k), Value: []byte("1")})
		}
		return nil
	}); err != nil || len(legacy) != 2 {
		t.Fatalf("setup: the legacy run's entry by its end: %d, %v", len(legacy)-1, err)
	}
	if err := <-bolt.Apply(legacy); err != nil {
		t.Fatal(err)
	}
	clock = start.Add(time.Hour)
	run("r-a")
	// r-b ends by its budget (a second step past max_steps=1), to be
	// resumed below.
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-b", RunBudget: "max_steps=1"}, strings.Replace(toolResponse, "call_x", "call_r-b", 1))
	if turn := step(p, &pipeline.Call{Body: taskBody, RunID: "r-b"}, toolResponse); turn.Answer == nil {
		t.Fatal("setup: the second step of a max_steps=1 run was forwarded")
	}
	leave()
	if err := <-bolt.Apply([]store.Op{{Bucket: store.Ended, Key: []byte("\xffcomplete")}}); err != nil {
		t.Fatal(err) // as a store written before the index was kept
	}

	// The first sweep reads every snapshot once and completes the index.
	clock = start.Add(2 * time.Hour)
	if n, err := p.SweepStored(true); n != 0 || err != nil {
		t.Fatalf("first sweep: %d runs, %v", n, err)
	}
	if scans, _ := st.reset(); scans[store.Runs] != 1 || present(store.Ended, "\xffcomplete") == "" {
		t.Fatalf("first sweep: %d scans of the snapshots, index complete %q", scans[store.Runs], present(store.Ended, "\xffcomplete"))
	}

	// Past r-legacy's retention only: its keys are found by reading the
	// lineage bucket.
	clock = start.Add(24*time.Hour + 30*time.Minute)
	if n, err := p.SweepStored(true); n != 1 || err != nil {
		t.Fatalf("sweep of r-legacy: %d runs, %v", n, err)
	}
	scans, reads := st.reset()
	if scans[store.Runs] != 0 || scans[store.Lineage] != 1 || reads != 1 {
		t.Fatalf("sweep of r-legacy: scans %v, %d snapshots read; want no scan of the snapshots, one of the lineage keys, one read", scans, reads)
	}
	if present(store.Runs, "r-legacy") != "" || present(store.Lineage, "tc:call_r-legacy") != "" {
		t.Fatal("r-legacy or its lineage key outlived the sweep")
	}

	// r-b is resumed and ends again; r-new writes the lineage keys of a
	// final answer last.
	clock = start.Add(25 * time.Hour)
	rec, _, _ := p.Record("r-b")
	if _, err := p.Resume("r-b", rec.ResumeToken, accounting.Budget{Vector: accounting.Vector{Steps: 3}}); err != nil {
		t.Fatal(err)
	}
	step(p, &pipeline.Call{Body: taskBody, RunID: "r-b"}, finalResponse)
	run("r-new")
	leave()
	// The final answer's text: every run above wrote its key.
	var shared string
	_ = bolt.ScanPrefix(store.Lineage, []byte("tx:"), func(k, _ []byte) error { shared = string(k); return nil })
	if shared == "" || present(store.Lineage, shared) != "r-new" {
		t.Fatalf("setup: %q points at %q", shared, present(store.Lineage, shared))
	}
	st.reset()

	// Past r-a's and r-b's first end: r-a goes, with its own lineage key
	// and not the one r-new wrote since; r-b, ended since, stays.
	clock = start.Add(25*time.Hour + 30*time.Minute)
	if n, err := p.SweepStored(true); n != 1 || err != nil {
		t.Fatalf("sweep of r-a: %d runs, %v", n, err)
	}
	scans, reads = st.reset()
	if len(scans) != 1 || scans[store.Ended] != 1 || reads != 2 {
		t.Fatalf("sweep of r-a: scans %v, %d snapshots read; want the index's scan only, two reads (r-a, r-b)", scans, reads)
	}
	if present(store.Runs, "r-a") != "" || present(store.Lineage, "tc:call_r-a") != "" {
		t.Fatal("r-a or its lineage key outlived the sweep")
	}
	if present(store.Runs, "r-b") == "" || present(store.Lineage, "tc:call_r-b") != "r-b" || present(store.Lineage, shared) != "r-new" {
		t.Fatal("the sweep deleted r-b, its key, or the key r-new wrote last")
	}
	// The keys r-b's stale entry listed stay listed, for its own expiry.
	carried := false
	_ = bolt.ScanPrefix(store.Owned, []byte("r-b\x00"), func(_, v []byte) error {
		carried = carried || bytes.Contains(v, []byte("tc:call_r-b"))
		return nil
	})
	if !carried {
		t.Fatal("the keys of r-b's first life left the store's lists with its stale entry")
	}
	// Left in the index: r-b's second end, r-new's, the mark.
	var entries []string
	_ = bolt.Scan(store.Ended, func(k, _ []byte) error { entries = append(entries, string(k[8:])); return nil })
	if got := strings.Join(entries, " "); got != "r-b r-new e" {
		t.Fatalf("index after the sweeps: %q", got)
	}
}

// BenchmarkSweepStored is one retention sweep of a store holding a history
// of ended runs kept (each a tool step and a final answer: snapshot,
// events, lineage keys) that deletes the runs past retention among them:
// with the store's indexes, its work follows what expires, not the
// history. The runs are copies of two runs the pipeline wrote, one ended
// before the retention's cutoff and one after.
func BenchmarkSweepStored(b *testing.B) {
	const kept, expired = 50_000, 1_000
	start := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clock := start
	now := func() time.Time { return clock }
	dir := b.TempDir()
	bolt := openBolt(b, dir)
	st := &bucketReads{Store: bolt, scans: map[store.Bucket]int{}}
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now, StoreRetention: 24 * time.Hour})
	run := func(id string) {
		step(p, &pipeline.Call{Body: taskBody, RunID: id}, strings.Replace(toolResponse, "call_x", "call_"+id, 1))
		step(p, &pipeline.Call{Body: taskBody, RunID: id}, finalResponse)
		clock = clock.Add(time.Minute)
		p.SweepEnded()
	}
	run("tpl-old")
	clock = start.Add(47 * time.Hour)
	run("tpl-new")
	// Every record naming a template, in any bucket, to copy with another id.
	records := func(tpl string) []store.Op {
		var ops []store.Op
		for _, bk := range store.AllBuckets {
			_ = bolt.Scan(bk, func(k, v []byte) error {
				if bytes.Contains(k, []byte(tpl)) || bytes.Contains(v, []byte(tpl)) {
					ops = append(ops, store.Op{Bucket: bk, Key: bytes.Clone(k), Value: bytes.Clone(v)})
				}
				return nil
			})
		}
		return ops
	}
	old, recent := records("tpl-old"), records("tpl-new")
	plant := func(tmpl []store.Op, tpl, prefix string, n int) {
		var ops []store.Op
		for i := range n {
			id := []byte(prefix + strconv.Itoa(i))
			for _, op := range tmpl {
				ops = append(ops, store.Op{Bucket: op.Bucket, Key: bytes.ReplaceAll(op.Key, []byte(tpl), id),
					Value: bytes.ReplaceAll(op.Value, []byte(tpl), id)})
			}
			if len(ops) >= 4096 || i == n-1 {
				if err := <-bolt.Apply(ops); err != nil {
					b.Fatal(err)
				}
				ops = nil
			}
		}
	}
	plant(recent, "tpl-new", "h-", kept)
	// A restart, which leaves the history in the bbolt file, as the
	// checkpoints of the hours before a sweep would have.
	bolt.Close()
	bolt = openBolt(b, dir)
	st = &bucketReads{Store: bolt, scans: map[store.Bucket]int{}}
	p = pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now, StoreRetention: 24 * time.Hour})
	clock = start.Add(48 * time.Hour)
	if _, err := p.SweepStored(true); err != nil { // a first sweep, as after an upgrade
		b.Fatal(err)
	}
	st.reset()
	deleted, reads := 0, 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		plant(old, "tpl-old", "x-", expired)
		st.reset()
		b.StartTimer()
		n, err := p.SweepStored(true)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_, r := st.reset()
		deleted, reads = deleted+n, reads+r
		b.StartTimer()
	}
	b.ReportMetric(float64(deleted)/float64(b.N), "runs-deleted/sweep")
	b.ReportMetric(float64(reads)/float64(b.N), "snapshots-read/sweep")
}

// A run's keys that its list does not hold yet when the gateway stops are
// listed by SaveOwned: after the restart, the run's retention finds them
// without reading the lineage bucket. After a crash (the store replays
// the log the process left) they may be missing from its list: the run,
// rebuilt, no longer claims to list them all, and its retention reads the
// bucket. Either way the key goes with the run.
func TestRetentionAfterARestart(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprint("crash=", crash), func(t *testing.T) {
			t.Parallel()
			start := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
			clock := start
			now := func() time.Time { return clock }
			pol, err := policy.New(context.Background(), policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			open := func(dir string) *store.Bolt {
				st, err := store.OpenBoltWith(dir, store.BoltOptions{CheckpointEvery: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			dir := t.TempDir()
			bolt := open(dir)
			p := pipeline.New(pipeline.Options{Policy: pol, Store: bolt, Now: now, StoreRetention: 24 * time.Hour})
			// One tool step: its lineage key noted, far from a record's worth.
			step(p, &pipeline.Call{Body: taskBody, RunID: "r-live"}, strings.Replace(toolResponse, "call_x", "call_r-live", 1))
			if crash {
				// The files as a killed process leaves them.
				crashed := filepath.Join(t.TempDir(), "data")
				if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
					t.Fatal(err)
				}
				dir = crashed
			} else {
				p.SaveOwned()
				bolt.Close()
			}
			bolt = open(dir)
			if bolt.Recovered() != crash {
				t.Fatalf("the store says recovered %v", bolt.Recovered())
			}
			st := &bucketReads{Store: bolt, scans: map[store.Bucket]int{}}
			p = pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now, StoreRetention: 24 * time.Hour,
				StoreRecovered: bolt.Recovered()})
			if n, err := p.Restore(context.Background()); n != 1 || err != nil {
				t.Fatalf("restore: %d runs, %v", n, err)
			}
			step(p, &pipeline.Call{Body: taskBody, RunID: "r-live"}, finalResponse)
			clock = clock.Add(time.Minute)
			p.SweepEnded()
			if _, err := p.SweepStored(true); err != nil { // completes the index
				t.Fatal(err)
			}
			st.reset()
			clock = start.Add(25 * time.Hour)
			if n, err := p.SweepStored(true); n != 1 || err != nil {
				t.Fatalf("sweep: %d runs, %v", n, err)
			}
			if scans, _ := st.reset(); scans[store.Lineage] != map[bool]int{false: 0, true: 1}[crash] {
				t.Fatalf("scans of the lineage bucket: %d", scans[store.Lineage])
			}
			if v, _ := bolt.Get(store.Lineage, []byte("tc:call_r-live")); v != nil {
				t.Fatal("the run's lineage key outlived it")
			}
		})
	}
}
