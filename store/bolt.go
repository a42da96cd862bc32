package store

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// MaxBatch bounds the ops committed in one transaction.
const MaxBatch = 4096

// DefaultCheckpointMemory is BoltOptions.CheckpointMemory's default.
const DefaultCheckpointMemory = 16 << 20

// Sync says when a write counts as committed.
type Sync int

const (
	// SyncInterval commits a write once its log record is written: the
	// kernel holds it, so a crash, a kill or a restart of the process loses
	// nothing. The log is fsynced every SyncEvery, which bounds what a power
	// loss or a kernel crash can take.
	SyncInterval Sync = iota
	// SyncAlways commits a write once the log is fsynced: nothing acknowledged
	// is lost even on a power loss, at the cost of an fsync per group commit.
	SyncAlways
)

// ParseSync reads the configuration's name of a sync policy.
func ParseSync(s string) (Sync, error) {
	switch s {
	case "", "interval":
		return SyncInterval, nil
	case "always":
		return SyncAlways, nil
	}
	return 0, fmt.Errorf("store: sync %q is not interval or always", s)
}

// BoltOptions tune the embedded store; zero values take the defaults.
type BoltOptions struct {
	Sync Sync
	// SyncEvery is the log's fsync period under SyncInterval (default 100 ms).
	SyncEvery time.Duration
	// CheckpointEvery is how often the bbolt file catches up with the log
	// (default 8 s); CheckpointOps, distinct keys waiting (default 32768),
	// and CheckpointBytes, bytes in the log (default 32 MiB), force one
	// sooner. A bbolt write dirties a 4 KB page per random key: the longer
	// the window, the more of a run's rewrites of the same keys collapse
	// into one, up to the 8 s the checkpoint's cost stops falling at
	// (docs/performance.md, BenchmarkCheckpointPerCall). The two bounds,
	// not the period, cap what a restart after a kill replays
	// (BenchmarkReopenAfterCrash) and what the overlay holds in memory at
	// high rates.
	CheckpointEvery time.Duration
	CheckpointOps   int
	CheckpointBytes int64
	// CheckpointMemory bounds, in bytes, the memory the writes not yet in
	// the bbolt file hold (the overlay: keys, values and the maps'
	// entries; default DefaultCheckpointMemory): a checkpoint starts once
	// the overlay taking new writes passes it. The period and the log's
	// size bound the same writes in time and on disk; this bound is what
	// keeps the process's memory flat at any write rate. While a
	// checkpoint runs, the overlay it writes out is held as well, so the
	// overlays' total stays under about twice this.
	CheckpointMemory int64
	// CheckpointTxOps is the most keys one bbolt transaction of a
	// checkpoint takes (default 2048): a bound on how long a checkpoint
	// holds a core without yielding, at the cost of a commit (two fsyncs,
	// off the call path) per batch.
	CheckpointTxOps int
	// Logger takes the warning of a torn log tail cut off at open
	// (default slog.Default()).
	Logger *slog.Logger
}

func (o *BoltOptions) defaults() {
	if o.SyncEvery <= 0 {
		o.SyncEvery = 100 * time.Millisecond
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = 8 * time.Second
	}
	if o.CheckpointOps <= 0 {
		o.CheckpointOps = 32768
	}
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = 32 << 20
	}
	if o.CheckpointMemory <= 0 {
		o.CheckpointMemory = DefaultCheckpointMemory
	}
	if o.CheckpointTxOps <= 0 {
		o.CheckpointTxOps = 2048
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Bolt is the embedded store: a write-ahead log in front of one bbolt file.
// Group commits append to the log (cheap, on the call path); a background
// checkpoint moves them into bbolt in one transaction (costly, off it), and
// reads see the log's writes through an in-memory overlay until then.
type Bolt struct {
	db   *bolt.DB
	dir  string
	opts BoltOptions
	*GroupCommitter

	buf []byte // the writer goroutine's record buffer

	// walMu orders the writer's appends against the checkpoint's switch
	// to a new segment.
	walMu sync.Mutex
	seg   *segment
	dirty bool // written since the last fsync

	// recovered: opening replayed a log a previous process left (see
	// Recovered).
	recovered bool

	// ovMu guards the overlays; reads take it shared.
	ovMu   sync.RWMutex
	active *overlay
	// onCommit, when set (a read cache: Cached), learns of every commit's
	// writes as they become visible; called under ovMu.
	onCommit func(batches [][]Op)
	frozen   []*overlay // being checkpointed, oldest first
	sealed   []*segment // the segments of frozen

	// ckMu serialises checkpoints (the background's, Close's, tests').
	ckMu   sync.Mutex
	ckKeys []string // a checkpoint's keys of one bucket, sorted; under ckMu

	// fsBusy is set while the background goroutine fsyncs or checkpoints:
	// a journal commit then may hold a write, so the log's is not raw
	// (segment.writeRaw); nor for a while after a raw one was slow
	// (rawWriteTook).
	fsBusy atomic.Bool
	// Under walMu, as every log write is.
	rawPausedUntil time.Time
	rawPause       time.Duration // the last pause

	nudge   chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	bgErr   atomic.Pointer[error]
}

// OpenBolt opens (or creates) dir/haltline.db with the default options.
func OpenBolt(dir string) (*Bolt, error) { return OpenBoltWith(dir, BoltOptions{}) }

// OpenBoltWith opens (or creates) dir/haltline.db, replays the log left by
// the last process into it and starts a new log. Damage to the log other
// than a torn tail, or to the bbolt file, is a *DamageError (doc.go).
func OpenBoltWith(dir string, opts BoltOptions) (*Bolt, error) {
	opts.defaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The whole log is read before any of it is applied: damage in its
	// middle stops the start with the bbolt file as it was.
	segs, err := checkLog(dir)
	if err != nil {
		return nil, fmt.Errorf("store log: %w", err)
	}
	if err := logDamage(dir, segs); err != nil {
		return nil, err
	}
	metas, err := checkMeta(filepath.Join(dir, dbFile))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := metaDamage(dir, metas); err != nil {
		return nil, err
	}
	cut, err := cutTornTail(dir, segs)
	if err != nil {
		return nil, fmt.Errorf("store log: %w", err)
	}
	if cut != nil {
		opts.Logger.Warn("store log: a torn tail cut off (a write a crash interrupted; the commit it held is lost as a whole)",
			"dir", dir, "segment", cut.Name, "offset", cut.Whole, "bytes", cut.Size-cut.Whole, "records_kept", cut.Records)
	}
	db, err := openDB(dir, &bolt.Options{
		Timeout: 2 * time.Second,
		// The freelist is written at every commit (a few pages: bbolt
		// reuses freed pages) rather than rebuilt at open by reading every
		// page of the file, which grows a restart with the file's size and
		// costs the checkpoint nothing measurable (BenchmarkCheckpoint).
		// Kept as a hashmap.
		NoFreelistSync: false,
		FreelistType:   bolt.FreelistMapType,
		// Address space, not memory: a file growing within it is never
		// remapped, and a remap copies every in-memory node out of the old
		// map (measured at a quarter of a checkpoint's time).
		InitialMmapSize: 1 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err = guard(dir, func() error { return createBuckets(db) }); err != nil {
		db.Close()
		return nil, err
	}
	var next uint64
	var replayed int
	err = guard(dir, func() (err error) {
		next, replayed, err = replayLog(db, dir)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("replay store log: %w", err)
	}
	seg, err := createSegment(dir, next)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store log: %w", err)
	}
	s := &Bolt{db: db, dir: dir, opts: opts, seg: seg, active: newOverlay(), recovered: replayed > 0,
		nudge: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	// With an fsync per commit, a call's first write (before it is
	// forwarded) is left to the writer, so the fsync overlaps the upstream
	// call instead of delaying it.
	s.GroupCommitter = NewGroupCommitter(s.commit, opts.Sync != SyncAlways)
	go s.background()
	return s, nil
}

// createBuckets creates the buckets a store lacks (a new file, or one from
// a version with fewer). Looked for first: a commit fsyncs the file, which
// at every start would be a wait of its own, or the flush of every page a
// copied store had not yet written.
func createBuckets(db *bolt.DB) error {
	missing := false
	_ = db.View(func(tx *bolt.Tx) error {
		for _, b := range AllBuckets {
			missing = missing || tx.Bucket([]byte(b)) == nil
		}
		return nil
	})
	if !missing {
		return nil
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, b := range AllBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
}

// replayLog applies the segments left in dir to the bbolt file, oldest
// first, deletes them, and returns the next segment number and how many
// it replayed.
func replayLog(db *bolt.DB, dir string) (next uint64, replayed int, err error) {
	seqs, err := listSegments(dir)
	if err != nil {
		return 0, 0, err
	}
	var keys []string
	for _, seq := range seqs {
		// A segment holds one checkpoint period of writes: read whole.
		data, err := os.ReadFile(segmentPath(dir, seq))
		if err != nil {
			return 0, 0, err
		}
		// Each key's last write, then into bbolt in key order as a
		// checkpoint does: a segment rewrites a run's keys at every call.
		o := newOverlay()
		var n int
		n, err = readRecords(data, func(payload []byte) error {
			return decodeOps(payload, func(op Op) error {
				o.put(op)
				return nil
			})
		})
		if err == nil && n < len(data) {
			// checkLog found it whole, or cut it so.
			err = fmt.Errorf("%s changed while the store opened", filepath.Base(segmentPath(dir, seq)))
		}
		if err == nil {
			err = putOverlays(db, []*overlay{o}, 0, &keys, nil, nil)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("segment %d: %w", seq, err)
		}
	}
	// Only once everything is in bbolt (fsynced by its commit) may the
	// segments go; a crash before this line replays them again, harmlessly.
	for _, seq := range seqs {
		if err := os.Remove(segmentPath(dir, seq)); err != nil {
			return 0, 0, err
		}
	}
	if len(seqs) > 0 {
		// A removal a power loss undid would replay old writes over newer ones.
		if err := syncDir(dir); err != nil {
			return 0, 0, err
		}
	}
	if len(seqs) == 0 {
		return 1, 0, nil
	}
	return seqs[len(seqs)-1] + 1, len(seqs), nil
}

// commit is the group committer's write: one log record for every batch
// queued. The overlay keeps the ops' slices, which Apply's callers hand over.
func (s *Bolt) commit(batches [][]Op) error {
	rec, err := appendRecord(s.buf[:0], batches)
	if err != nil {
		return err
	}
	if cap(rec) <= 1<<20 {
		s.buf = rec
	}
	s.walMu.Lock()
	t0 := time.Now()
	raw := s.rawLogWrite(t0)
	err = s.seg.write(rec, raw)
	if raw {
		s.rawWriteTook(time.Since(t0), t0)
	}
	if err == nil && s.opts.Sync == SyncAlways {
		err = s.seg.f.Sync()
	}
	if err != nil {
		s.walMu.Unlock()
		return err
	}
	s.dirty = s.opts.Sync == SyncInterval
	s.ovMu.Lock()
	s.active.apply(batches)
	if s.onCommit != nil {
		s.onCommit(batches)
	}
	full := s.active.ops >= s.opts.CheckpointOps || s.seg.size >= s.opts.CheckpointBytes || s.active.bytes >= s.opts.CheckpointMemory
	s.ovMu.Unlock()
	s.walMu.Unlock()
	if full {
		select {
		case s.nudge <- struct{}{}:
		default:
		}
	}
	return nil
}

// The log's write is raw (segment.writeRaw) unless the last raw one took
// longer than slowRawWrite (an append to the page cache takes
// microseconds); then not for rawPause, or twice the last pause when raw
// writes had resumed less than maxRawPause before, up to maxRawPause: a
// file system that keeps stalling writes (dirty pages throttled on a busy
// host) soon gets only ordinary ones.
const (
	slowRawWrite = time.Millisecond
	rawPause     = time.Second
	maxRawPause  = time.Minute
)

// rawLogWrite reports whether the log's next write may be raw
// (segment.writeRaw): the store is not fsyncing or checkpointing, no raw
// write was slow lately, and the write is not followed by an fsync anyway
// (SyncAlways). The caller holds walMu.
func (s *Bolt) rawLogWrite(now time.Time) bool {
	return s.opts.Sync == SyncInterval && !s.fsBusy.Load() && !now.Before(s.rawPausedUntil)
}

// rawWriteTook pauses raw writes when one that started at start was
// slow. The caller holds walMu.
func (s *Bolt) rawWriteTook(d time.Duration, start time.Time) {
	if d <= slowRawWrite {
		return
	}
	if start.Sub(s.rawPausedUntil) > maxRawPause {
		s.rawPause = rawPause
	} else {
		s.rawPause = min(2*s.rawPause, maxRawPause)
	}
	s.rawPausedUntil = start.Add(d + s.rawPause)
}

// background fsyncs the log on its period and checkpoints.
func (s *Bolt) background() {
	defer close(s.stopped)
	tick := time.NewTicker(min(s.opts.SyncEvery, s.opts.CheckpointEvery))
	defer tick.Stop()
	lastCheckpoint := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-s.nudge:
		case <-tick.C:
			s.fsBusy.Store(true)
			s.syncLog()
			s.fsBusy.Store(false)
			if time.Since(lastCheckpoint) < s.opts.CheckpointEvery {
				continue
			}
		}
		s.fsBusy.Store(true)
		s.report(s.checkpoint())
		s.fsBusy.Store(false)
		lastCheckpoint = time.Now()
	}
}

func (s *Bolt) report(err error) {
	if err != nil {
		s.bgErr.Store(&err)
	} else {
		s.bgErr.Store(nil)
	}
}

// syncLog fsyncs the active segment when it was written since.
func (s *Bolt) syncLog() {
	s.walMu.Lock()
	seg, dirty := s.seg, s.dirty
	s.dirty = false
	s.walMu.Unlock()
	if dirty {
		// Only this goroutine closes segments, so seg stays open.
		if err := seg.f.Sync(); err != nil {
			s.report(err)
		}
	}
}

// checkpoint moves the log's writes into the bbolt file: it seals the
// active segment and overlay, commits the sealed overlays in one bbolt
// transaction (fsynced), then drops them and deletes their segments. On a
// failure they stay, readable, and the next checkpoint tries again.
func (s *Bolt) checkpoint() error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.ovMu.RLock()
	empty := s.active.ops == 0 && len(s.frozen) == 0
	s.ovMu.RUnlock()
	if empty {
		return nil
	}
	// The next segment is created (and its name fsynced) before commits
	// are held up; only this goroutine replaces s.seg, so reading it here
	// is safe.
	next, err := createSegment(s.dir, s.seg.seq+1)
	if err != nil {
		return fmt.Errorf("store log: %w", err)
	}
	s.walMu.Lock()
	if s.active.ops == 0 {
		// Nothing was committed since the last check: keep the segment.
		s.walMu.Unlock()
		next.f.Close()
		if err := os.Remove(next.path); err != nil {
			return fmt.Errorf("store log: %w", err)
		}
	} else {
		s.ovMu.Lock()
		s.frozen = append(s.frozen, s.active)
		s.sealed = append(s.sealed, s.seg)
		s.active = s.active.next()
		s.ovMu.Unlock()
		sealed, dirty := s.seg, s.dirty
		s.seg, s.dirty = next, false
		s.walMu.Unlock()
		// The sealed segment's last writes reach the disk before the new
		// one is fsynced (by syncLog, on this goroutine, so not before
		// this): a power loss then tears only the newest segment's tail,
		// the one place a torn record is not taken for damage.
		if dirty {
			if err := sealed.f.Sync(); err != nil {
				return fmt.Errorf("store log: %w", err)
			}
		}
	}

	s.ovMu.RLock()
	frozen := s.frozen
	s.ovMu.RUnlock()
	err = s.commitOverlays(frozen)
	if err != nil {
		return fmt.Errorf("store checkpoint: %w", err)
	}
	releaseMapped(s.db)
	s.ovMu.Lock()
	sealed := s.sealed
	s.frozen, s.sealed = s.frozen[len(frozen):], nil
	s.ovMu.Unlock()
	for _, seg := range sealed {
		seg.f.Close()
		if err := os.Remove(seg.path); err != nil {
			return fmt.Errorf("store log: %w", err)
		}
	}
	if len(sealed) > 0 {
		// A removal a power loss undid would replay old writes over newer ones.
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("store log: %w", err)
		}
	}
	return nil
}

// Checkpoint moves the log into the bbolt file now, as the background
// checkpoint does on its period (for benchmarks and tools).
func (s *Bolt) Checkpoint() error { return s.checkpoint() }

// yieldToCalls lets the calls run between a checkpoint's steps. Not
// runtime.Gosched: a yielded goroutine waits in the global run queue, which
// the scheduler serves before it polls the network, so a checkpoint that
// yields in a loop keeps the calls waiting on their sockets until sysmon
// polls (up to 10 ms). A goroutine asleep on a timer
// is not runnable: the scheduler polls the network, runs the calls it
// woke, then the checkpoint once the timer is due (on an idle core, within
// the poller's 1 ms resolution).
func yieldToCalls() { time.Sleep(time.Microsecond) }

// commitOverlays writes the frozen overlays into bbolt, oldest first, in
// transactions of at most CheckpointTxOps keys. A bbolt commit (rebalance,
// spill, page writes) cannot yield, and this goroutine may share one core
// with the calls: one transaction of 8,000 scattered keys held that core
// for 10 ms, a stall every call in flight waited out. The log stays until
// every transaction has committed, so a failure or a crash in between
// leaves it to be replayed over the partial state, which ends in the same
// one (each key's last write wins, as in one transaction).
func (s *Bolt) commitOverlays(frozen []*overlay) error {
	return guard(s.dir, func() error {
		return putOverlays(s.db, frozen, s.opts.CheckpointTxOps, &s.ckKeys, yieldToCalls, func() { releaseMapped(s.db) })
	})
}

// putOverlays writes the overlays into db, oldest first, in transactions of
// at most txOps keys (0: one transaction), calling yield between some and
// committed, when set, after each transaction but the last (between two
// write transactions: see releaseMapped). keys is a buffer it may reuse.
func putOverlays(db *bolt.DB, frozen []*overlay, txOps int, keys *[]string, yield, committed func()) error {
	tx, err := db.Begin(true)
	if err != nil {
		return err
	}
	defer func() {
		if tx != nil {
			tx.Rollback() // a no-op once committed
		}
		clear(*keys) // the frozen overlays' keys are not kept past them
	}()
	n := 0
	for _, o := range frozen {
		for b, m := range o.buckets {
			name := []byte(b)
			bk := tx.Bucket(name)
			if bk == nil {
				return fmt.Errorf("store: no bucket %q", b)
			}
			// In key order: consecutive puts land on the leaf bbolt has
			// just read, and each transaction of CheckpointTxOps keys
			// covers one key range (fewer branch pages to rewrite), where
			// a map's random order would walk the tree afresh for every
			// key (BenchmarkCheckpointPerCall).
			sorted := (*keys)[:0]
			for k := range m {
				sorted = append(sorted, k)
			}
			slices.Sort(sorted)
			*keys = sorted
			for _, k := range sorted {
				v := m[k]
				n++
				switch {
				case txOps > 0 && n%txOps == 0:
					if err := tx.Commit(); err != nil {
						return err
					}
					if committed != nil {
						committed()
					}
					if yield != nil {
						yield()
					}
					if tx, err = db.Begin(true); err != nil {
						return err
					}
					bk = tx.Bucket(name)
				case yield != nil && n%64 == 0:
					yield()
				}
				// bbolt keeps the key until the transaction commits; the
				// frozen overlay holds the string until then and nothing
				// writes to it, so it goes in without a copy.
				key := unsafe.Slice(unsafe.StringData(k), len(k))
				var err error
				if v == nil {
					err = bk.Delete(key)
				} else {
					err = bk.Put(key, v)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return tx.Commit()
}

// layers returns the overlays, oldest first; the caller holds ovMu.
func (s *Bolt) layers() []*overlay {
	return append(append(make([]*overlay, 0, len(s.frozen)+1), s.frozen...), s.active)
}

// logged is the newest write of key the log holds and the bbolt file does
// not yet (see overlay.get); the caller holds ovMu.
func (s *Bolt) logged(b Bucket, key []byte) (value []byte, found bool) {
	value, found = s.active.get(b, key)
	for i := len(s.frozen) - 1; !found && i >= 0; i-- {
		value, found = s.frozen[i].get(b, key)
	}
	return value, found
}

// Get implements Store.
func (s *Bolt) Get(b Bucket, key []byte) ([]byte, error) {
	s.ovMu.RLock()
	v, ok := s.logged(b, key)
	s.ovMu.RUnlock()
	if ok {
		return bytes.Clone(v), nil
	}
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(b))
		if bk == nil {
			return fmt.Errorf("store: no bucket %q", b)
		}
		if v := bk.Get(key); v != nil {
			out = bytes.Clone(v)
		}
		return nil
	})
	return out, err
}

// GetMany implements Store: the overlay's records, then the others in one
// read transaction a batch of GetManyBatch keys.
func (s *Bolt) GetMany(b Bucket, keys [][]byte, fn func(i int, value []byte) error) error {
	found := make([]bool, min(len(keys), GetManyBatch))
	return getBatches(keys, func(batch, vals [][]byte) error {
		inFile := 0
		s.ovMu.RLock()
		for i, key := range batch {
			v, ok := s.logged(b, key)
			vals[i], found[i] = bytes.Clone(v), ok
			if !ok {
				inFile++
			}
		}
		s.ovMu.RUnlock()
		if inFile == 0 {
			return nil
		}
		return s.view(func(tx *bolt.Tx) error {
			bk := tx.Bucket([]byte(b))
			if bk == nil {
				return fmt.Errorf("store: no bucket %q", b)
			}
			for i, key := range batch {
				if !found[i] {
					vals[i] = bytes.Clone(bk.Get(key))
				}
			}
			return nil
		})
	}, fn)
}

// getBatches is GetMany's walk: read fills vals with the records of a
// batch of at most GetManyBatch keys, then fn gets them in order, outside
// read (a transaction), since fn may read the store.
func getBatches(keys [][]byte, read func(batch, vals [][]byte) error, fn func(i int, value []byte) error) error {
	vals := make([][]byte, min(len(keys), GetManyBatch))
	for start := 0; start < len(keys); start += GetManyBatch {
		batch := keys[start:min(start+GetManyBatch, len(keys))]
		if err := read(batch, vals[:len(batch)]); err != nil {
			return err
		}
		for i := range batch {
			if err := fn(start+i, vals[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Scan implements Store.
func (s *Bolt) Scan(b Bucket, fn func(key, value []byte) error) error {
	return s.ScanPrefix(b, nil, fn)
}

// ScanPrefix implements Store.
func (s *Bolt) ScanPrefix(b Bucket, prefix []byte, fn func(key, value []byte) error) error {
	s.ovMu.RLock()
	over := layered(s.layers(), b, prefix)
	s.ovMu.RUnlock()
	// fn is the caller's: a panic of its own is not damage.
	calling := false
	return guardCalling(s.dir, &calling, func() error {
		return s.db.View(func(tx *bolt.Tx) error {
			bk := tx.Bucket([]byte(b))
			if bk == nil {
				return fmt.Errorf("store: no bucket %q", b)
			}
			c := bk.Cursor()
			k, v := c.Seek(prefix)
			next := func() ([]byte, []byte) {
				if k == nil || !bytes.HasPrefix(k, prefix) {
					return nil, nil
				}
				rk, rv := k, v
				k, v = c.Next()
				return rk, rv
			}
			return mergeScan(over, next, func(k, v []byte) error {
				calling = true
				err := fn(k, v)
				calling = false
				return err
			})
		})
	})
}

// view is a read transaction of the bbolt file in which a page bbolt
// cannot read is an error (guard), not the end of the process.
func (s *Bolt) view(fn func(tx *bolt.Tx) error) error {
	return guard(s.dir, func() error { return s.db.View(fn) })
}

// Recovered reports whether opening the store replayed a log that the
// previous process left: it stopped without closing the store (a crash, a
// kill). What that process held in memory only is gone; what it committed
// is here.
func (s *Bolt) Recovered() bool { return s.recovered }

// Healthy implements Store.
func (s *Bolt) Healthy() error {
	if s.Closed() {
		return ErrClosed
	}
	if err := s.LastError(); err != nil {
		return err
	}
	if p := s.bgErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Close implements Store: what is queued is committed, and the log is
// checkpointed into the bbolt file.
func (s *Bolt) Close() error {
	if !s.GroupCommitter.Close() {
		return nil
	}
	close(s.stop)
	<-s.stopped
	err := s.checkpoint()
	if err == nil {
		s.seg.f.Close()
		err = os.Remove(s.seg.path)
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// PagesWritten is how many pages the bbolt file's transactions have
// written since it was opened (a checkpoint's cost grows with them).
func (s *Bolt) PagesWritten() int64 {
	st := s.db.Stats()
	return st.TxStats.GetWrite()
}
