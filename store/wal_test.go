package store

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// abandon stops the store the way a killed process would: the log stays
// as it is, not checkpointed. Tests use it to exercise the replay.
func (s *Bolt) abandon() {
	s.GroupCommitter.Close()
	close(s.stop)
	<-s.stopped
	s.seg.f.Close()
	s.db.Close()
}

// slowCheckpoints keeps every write in the log and the overlay for the
// length of a test.
var slowCheckpoints = BoltOptions{CheckpointEvery: time.Hour, SyncEvery: time.Hour}

func collect(t *testing.T, s *Bolt, b Bucket, prefix []byte) []string {
	t.Helper()
	var out []string
	err := s.ScanPrefix(b, prefix, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustApply(t *testing.T, s *Bolt, ops ...Op) {
	t.Helper()
	if err := <-s.Apply(ops); err != nil {
		t.Fatal(err)
	}
}

func put(b Bucket, k, v string) Op { return Op{Bucket: b, Key: []byte(k), Value: []byte(v)} }
func del(b Bucket, k string) Op    { return Op{Bucket: b, Key: []byte(k)} }

// A scan of one run's keys (a prefix up to its first NUL) finds them in
// the overlay's group of the run, merged as a scan of any prefix is: a
// rewrite is one record, a delete hides the file's, another run's keys and
// keys without the NUL stay out.
func TestScanOfARunsKeys(t *testing.T) {
	t.Parallel()
	s, err := OpenBoltWith(t.TempDir(), slowCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustApply(t, s, put(Events, "r1\x00a", "1"), put(Events, "r1\x00d", "1"), put(Events, "r1\x00e", "1"))
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put(Events, "r1\x00b", "2"), put(Events, "r10\x00a", "2"), put(Events, "r1", "2"),
		put(Events, "r1x", "2"), del(Events, "r1\x00d"), put(Events, "r1\x00e", "2"))
	s.ovMu.Lock()
	s.frozen = append(s.frozen, s.active)
	s.active = s.active.next()
	s.ovMu.Unlock()
	mustApply(t, s, put(Events, "r1\x00b", "3"), put(Events, "r1\x00c", "3"), put(Events, "r2\x00a", "3"))
	want := []string{"r1\x00a=1", "r1\x00b=3", "r1\x00c=3", "r1\x00e=2"}
	if got := collect(t, s, Events, []byte("r1\x00")); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scan of r1 = %q, want %q", got, want)
	}
	if got := collect(t, s, Events, []byte("r1")); len(got) != 7 {
		t.Fatalf("scan of the prefix r1 = %q, want r1's four, r10's, r1 and r1x", got)
	}
}

// GetMany reads as Get does — the log's layers over the bbolt file, a
// delete hiding the file's record — each key in order, over more keys than
// one read transaction takes.
func TestGetMany(t *testing.T) {
	t.Parallel()
	s, err := OpenBoltWith(t.TempDir(), slowCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := GetManyBatch*2 + 7
	var keys [][]byte
	var file, log []Op
	for i := range n {
		k := fmt.Sprintf("r%04d", i)
		keys = append(keys, []byte(k))
		switch i % 4 {
		case 0: // in the file only
			file = append(file, put(Runs, k, "file"))
		case 1: // in the file, then rewritten in the log
			file = append(file, put(Runs, k, "file"))
			log = append(log, put(Runs, k, "log"))
		case 2: // in the file, then deleted in the log
			file = append(file, put(Runs, k, "file"))
			log = append(log, del(Runs, k))
		} // 3: nowhere
	}
	mustApply(t, s, file...)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, log...)
	next := 0
	err = s.GetMany(Runs, keys, func(i int, v []byte) error {
		want, _ := s.Get(Runs, keys[i])
		if i != next || !bytes.Equal(v, want) || (v == nil) != (i%4 >= 2) {
			t.Fatalf("call %d: key %d = %q, Get gives %q", next, i, v, want)
		}
		next++
		return nil
	})
	if err != nil || next != n {
		t.Fatalf("%d of %d keys, %v", next, n, err)
	}
}

// Reads see the log's writes merged over the bbolt file, in key order, with
// deletes hiding older values, before and after a checkpoint.
func TestReadsMergeLogAndFile(t *testing.T) {
	t.Parallel()
	s, err := OpenBoltWith(t.TempDir(), slowCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustApply(t, s, put(Runs, "a", "1"), put(Runs, "c", "1"), put(Runs, "e", "1"), put(Lineage, "a", "x"))
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put(Runs, "b", "2"), put(Runs, "c", "2"), del(Runs, "e"), put(Runs, "f", "2"))
	want := []string{"a=1", "b=2", "c=2", "f=2"}
	if got := collect(t, s, Runs, nil); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scan = %v, want %v", got, want)
	}
	if v, _ := s.Get(Runs, []byte("c")); string(v) != "2" {
		t.Fatalf("get c = %q", v)
	}
	if v, _ := s.Get(Runs, []byte("e")); v != nil {
		t.Fatalf("deleted e = %q", v)
	}
	if v, _ := s.Get(Lineage, []byte("a")); string(v) != "x" {
		t.Fatalf("get lineage a = %q", v)
	}
	// A second sealed layer on top of the first, then everything in bbolt.
	s.ovMu.Lock()
	s.frozen = append(s.frozen, s.active)
	s.active = newOverlay()
	s.ovMu.Unlock()
	mustApply(t, s, put(Runs, "b", "3"), del(Runs, "a"))
	want = []string{"b=3", "c=2", "f=2"}
	if got := collect(t, s, Runs, nil); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("layered scan = %v, want %v", got, want)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, s, Runs, nil); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scan after checkpoint = %v, want %v", got, want)
	}
	if got := collect(t, s, Runs, []byte("c")); fmt.Sprint(got) != "[c=2]" {
		t.Fatalf("prefix scan = %v", got)
	}
}

// A store abandoned the way a killed process leaves it — writes in the log,
// never checkpointed — has them all after reopening, and says it recovered
// them; one closed says nothing of the kind.
func TestLogReplaysAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenBoltWith(dir, slowCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	if s.Recovered() {
		t.Fatal("a new store recovered a log")
	}
	mustApply(t, s, put(Runs, "r1", "v1"), put(Events, "r1\x00\x01", "e1"))
	if err := s.checkpoint(); err != nil { // some of it in bbolt already
		t.Fatal(err)
	}
	for i := range 50 {
		mustApply(t, s, put(Runs, "r1", fmt.Sprint("v", i+2)), put(Events, fmt.Sprintf("r1\x00\x02%02d", i), "e"))
	}
	mustApply(t, s, del(Events, "r1\x00\x01"))
	s.abandon()

	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Get(Runs, []byte("r1")); string(v) != "v51" {
		t.Fatalf("run after replay = %q", v)
	}
	if got := collect(t, s, Events, []byte("r1\x00")); len(got) != 50 {
		t.Fatalf("%d events after replay, want 50", len(got))
	}
	if seqs, _ := listSegments(dir); len(seqs) != 1 {
		t.Fatalf("segments after replay: %v (want only the new one)", seqs)
	}
	if !s.Recovered() {
		t.Fatal("the replay of a killed process's log not reported")
	}
	s.Close()
	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Recovered() {
		t.Fatal("a store reopened after a close says it recovered a log")
	}
}

// A record torn by a power loss ends its segment: the groups before it are
// replayed whole, the torn group not at all.
func TestTornRecordIsDropped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenBoltWith(dir, slowCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put(Runs, "a", "1"))
	mustApply(t, s, put(Runs, "b", "1"), put(Runs, "c", "1"))
	path := s.seg.path
	s.abandon()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for cut := len(data) - 1; cut > 0; cut -= 7 {
		tdir := t.TempDir()
		if err := os.WriteFile(segmentPath(tdir, 9), data[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenBolt(tdir)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, s, Runs, nil)
		s.Close()
		if len(got) != 0 && fmt.Sprint(got) != "[a=1]" {
			t.Fatalf("cut at %d: %v", cut, got)
		}
	}
	// A flipped byte in the second record drops it; the first survives.
	bad := bytes.Clone(data)
	bad[len(bad)-2] ^= 0xff
	tdir := t.TempDir()
	if err := os.WriteFile(segmentPath(tdir, 1), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(tdir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := collect(t, s, Runs, nil); fmt.Sprint(got) != "[a=1]" {
		t.Fatalf("corrupt record: %v", got)
	}
}

// Under SyncAlways every commit is fsynced before it is acknowledged; the
// checkpoint by op count empties the overlay.
func TestSyncAlwaysAndCheckpointByCount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenBoltWith(dir, BoltOptions{Sync: SyncAlways, CheckpointEvery: time.Hour, CheckpointOps: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		mustApply(t, s, put(Runs, fmt.Sprint("r", i), "v"))
	}
	waitForCheckpoint(t, s, 10)
	if got := collect(t, s, Runs, nil); len(got) != 30 {
		t.Fatalf("%d runs", len(got))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if seqs, _ := listSegments(dir); len(seqs) != 0 {
		t.Fatalf("segments after close: %v", seqs)
	}
}

// waitForCheckpoint waits (at most 10 s) until the active overlay holds
// fewer than n keys: a checkpoint has taken them.
func waitForCheckpoint(t *testing.T, s *Bolt, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.ovMu.RLock()
		keys := s.active.ops
		s.ovMu.RUnlock()
		if keys < n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint: the overlay still holds %d keys", keys)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A log past CheckpointBytes, or an overlay past CheckpointMemory, is
// checkpointed before the period: a run of large values cannot grow the
// log (and a restart's replay) without bound, nor the memory the writes
// waiting for a checkpoint hold.
func TestCheckpointByBytes(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]BoltOptions{
		"log":    {CheckpointBytes: 64 << 10, CheckpointMemory: 1 << 40},
		"memory": {CheckpointBytes: 1 << 40, CheckpointMemory: 64 << 10},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts.CheckpointEvery, opts.CheckpointOps = time.Hour, 1<<30
			s, err := OpenBoltWith(t.TempDir(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			big := strings.Repeat("x", 16<<10)
			for i := range 8 { // 128 KiB of values: past the bound at the fourth
				mustApply(t, s, put(Blobs, fmt.Sprint("b", i), big))
			}
			waitForCheckpoint(t, s, 8)
			if got := collect(t, s, Blobs, nil); len(got) != 8 {
				t.Fatalf("%d blobs", len(got))
			}
		})
	}
}

// The overlay's estimate of its memory counts each key once and each
// value's array, a rewrite replacing the value it drops.
func TestOverlayBytes(t *testing.T) {
	o := newOverlay()
	o.put(Op{Bucket: Runs, Key: []byte("run"), Value: make([]byte, 100)})
	if want := int64(3 + 100 + entryBytes); o.bytes != want {
		t.Fatalf("one key: %d bytes, want %d", o.bytes, want)
	}
	o.put(Op{Bucket: Runs, Key: []byte("run"), Value: make([]byte, 10, 40)})
	if want := int64(3 + 40 + entryBytes); o.bytes != want {
		t.Fatalf("rewritten: %d bytes, want %d", o.bytes, want)
	}
	o.put(Op{Bucket: Runs, Key: []byte("run")}) // a delete
	o.put(Op{Bucket: Events, Key: []byte("run\x00\x01"), Value: make([]byte, 7)})
	if want := int64(3+entryBytes) + int64(5+7+entryBytes); o.bytes != want {
		t.Fatalf("deleted, and another key: %d bytes, want %d", o.bytes, want)
	}
}

func FuzzReadRecords(f *testing.F) {
	rec, _ := appendRecord(nil, [][]Op{{put(Runs, "a", "1"), del(Events, "b")}, {put(Blobs, "", "")}})
	f.Add(rec)
	f.Add(rec[:len(rec)-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var again []byte
		n, err := readRecords(data, func(payload []byte) error {
			var ops []Op
			if err := decodeOps(payload, func(op Op) error { ops = append(ops, op); return nil }); err != nil {
				t.Fatalf("a checked record does not decode: %v", err)
			}
			again, _ = appendRecord(again, [][]Op{ops})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Whole records read back re-encode to the same bytes.
		if !bytes.Equal(again, data[:n]) {
			t.Fatalf("re-encoded %x, read %x", again, data[:n])
		}
	})
}

// BenchmarkCheckpoint moves a harness-like overlay into a bbolt file that
// already holds many runs: per op, what the background checkpoint costs.
func BenchmarkCheckpoint(b *testing.B) {
	s, err := OpenBoltWith(b.TempDir(), slowCheckpoints)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := bytes.Repeat([]byte("x"), 1100)
	ev := bytes.Repeat([]byte("e"), 600)
	const perRound = 8192
	n := 0
	fill := func() {
		var ops []Op
		for range perRound / 4 {
			n++
			run := fmt.Sprintf("r%d-%08x", n%1024, n*2654435761)
			ops = append(ops,
				Op{Bucket: Runs, Key: []byte(run), Value: val},
				Op{Bucket: Events, Key: EventKey(run, int64(n)), Value: ev},
				Op{Bucket: Lineage, Key: fmt.Appendf(nil, "call_%08x", n*2246822519), Value: []byte(run)},
				Op{Bucket: Reservations, Key: fmt.Appendf(nil, "%016x", n)})
		}
		if err := <-s.Apply(ops); err != nil {
			b.Fatal(err)
		}
	}
	for range 10 { // a file with history
		fill()
		if err := s.checkpoint(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		fill()
		b.StartTimer()
		if err := s.checkpoint(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perRound), "ns/op-moved")
}

// A checkpoint larger than CheckpointTxOps is committed in several bbolt
// transactions, in overlay order, and the file ends as one transaction would
// leave it: each key's last write, deletes applied. Abandoned after the
// checkpoint, the store reopens to the same state.
func TestCheckpointInSeveralTransactions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := slowCheckpoints
	opts.CheckpointTxOps = 7
	s, err := OpenBoltWith(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for layer := range 3 {
		for i := range 40 {
			k := fmt.Sprintf("r%02d", (i*7+layer*11)%50)
			if i%9 == layer {
				mustApply(t, s, del(Runs, k), put(Events, k+"\x00e", fmt.Sprint(layer)))
				delete(want, k)
				continue
			}
			mustApply(t, s, put(Runs, k, fmt.Sprint(layer, "-", i)), put(Events, k+"\x00e", fmt.Sprint(layer)))
			want[k] = fmt.Sprint(layer, "-", i)
		}
		s.ovMu.Lock() // seal this layer, as a checkpoint that failed would
		s.frozen = append(s.frozen, s.active)
		s.active = newOverlay()
		s.ovMu.Unlock()
	}
	txid := func() (id int) {
		s.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	before := txid()
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if len(s.frozen) != 0 {
		t.Fatalf("%d overlays left after the checkpoint", len(s.frozen))
	}
	keys := 0
	file := map[string]string{}
	s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(Runs)).ForEach(func(k, v []byte) error {
			file[string(k)] = string(v)
			return nil
		})
	})
	if fmt.Sprint(file) != fmt.Sprint(want) {
		t.Fatalf("bbolt holds %v\nwant %v", file, want)
	}
	// 3 layers of up to 50 runs and 50 events: many more keys than 7.
	s.db.View(func(tx *bolt.Tx) error { keys = tx.Bucket([]byte(Events)).Stats().KeyN; return nil })
	if n := txid() - before; n < 10 {
		t.Fatalf("%d bbolt transactions for the checkpoint of %d runs and %d events, want one per 7 keys", n, len(want), keys)
	}
	s.abandon()
	s, err = OpenBoltWith(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]string{}
	for _, kv := range collect(t, s, Runs, nil) {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("reopened: %v\nwant %v", got, want)
	}
}

// The log's write is raw only while the store is quiet: not while it
// fsyncs or checkpoints (a journal commit may hold a write), not for a
// while after a slow raw write, not under SyncAlways. Raw or not, the
// records on disk are the same bytes and replay the same.
func TestLogWriteRawOnlyWhileQuiet(t *testing.T) {
	t.Parallel()
	s, err := OpenBoltWith(t.TempDir(), slowCheckpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	if !s.rawLogWrite(now) {
		t.Fatal("a quiet store does not write its log raw")
	}
	s.fsBusy.Store(true)
	if s.rawLogWrite(now) {
		t.Fatal("raw write while the store fsyncs or checkpoints")
	}
	s.fsBusy.Store(false)
	s.rawWriteTook(100*time.Microsecond, now)
	if !s.rawLogWrite(now) {
		t.Fatal("a fast raw write paused raw writes")
	}
	s.rawWriteTook(3*time.Millisecond, now)
	if s.rawLogWrite(now.Add(rawPause)) {
		t.Fatal("raw writes not paused after a slow one")
	}
	end := now.Add(3*time.Millisecond + rawPause)
	if !s.rawLogWrite(end) {
		t.Fatal("raw writes still paused after rawPause")
	}
	// Slow again soon after: each pause twice the last, up to maxRawPause.
	for _, want := range []time.Duration{2 * rawPause, 4 * rawPause, 8 * rawPause, 16 * rawPause, 32 * rawPause, maxRawPause, maxRawPause} {
		s.rawWriteTook(2*time.Millisecond, end)
		end = end.Add(2 * time.Millisecond)
		if s.rawLogWrite(end.Add(want - time.Millisecond)) {
			t.Fatalf("raw writes paused for less than %v", want)
		}
		if end = end.Add(want); !s.rawLogWrite(end) {
			t.Fatalf("raw writes paused for more than %v", want)
		}
	}
	// Slow once more only after a long quiet spell: back to rawPause.
	end = end.Add(2 * maxRawPause)
	s.rawWriteTook(2*time.Millisecond, end)
	if !s.rawLogWrite(end.Add(2*time.Millisecond + rawPause)) {
		t.Fatal("the pause did not return to rawPause after a quiet spell")
	}

	always, err := OpenBoltWith(t.TempDir(), BoltOptions{Sync: SyncAlways, CheckpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer always.Close()
	if always.rawLogWrite(now) {
		t.Fatal("raw write under SyncAlways")
	}

	// The same records through either path: the same file.
	rec, err := appendRecord(nil, [][]Op{{put(Runs, "r1", "v1"), put(Events, "r1\x00\x01", "e1")}, {del(Runs, "r0")}})
	if err != nil {
		t.Fatal(err)
	}
	var files [2][]byte
	for i, raw := range []bool{true, false} {
		dir := t.TempDir()
		seg, err := createSegment(dir, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := seg.write(rec, raw); err != nil {
				t.Fatal(err)
			}
		}
		seg.f.Close()
		if seg.size != int64(3*len(rec)) {
			t.Fatalf("raw=%v: size %d, want %d", raw, seg.size, 3*len(rec))
		}
		if files[i], err = os.ReadFile(seg.path); err != nil {
			t.Fatal(err)
		}
		r, err := OpenBolt(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := collect(t, r, Runs, nil); fmt.Sprint(got) != "[r1=v1]" {
			t.Fatalf("raw=%v: replayed %v", raw, got)
		}
		r.Close()
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("a raw write and an ordinary one left different files")
	}
}

// A raw write that fails falls back to the ordinary one, whose error is
// reported, and the segment's size stays on a record boundary.
func TestLogRawWriteErrorFallsBack(t *testing.T) {
	t.Parallel()
	path := segmentPath(t.TempDir(), 1)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path) // read-only: write(2) fails with EBADF
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seg := &segment{seq: 1, path: path, f: f, fd: f.Fd()}
	if n := seg.writeRaw([]byte("record")); n != 0 {
		t.Fatalf("raw write to a read-only file wrote %d", n)
	}
	if err := seg.write([]byte("record"), true); err == nil {
		t.Fatal("no error from a write to a read-only file")
	}
	if seg.size != 0 {
		t.Fatalf("size %d after a failed write", seg.size)
	}
}
