package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Damage to the files of the embedded store: what opening the store
// tolerates (a torn tail of the log, cut off with a warning), what stops
// it (anything else), and what Check and Repair, behind `gateway store
// check|repair`, report and do. The rule is in doc.go.

// dbFile is the bbolt file's name in the data directory.
const dbFile = "haltline.db"

// ErrDamaged is what every DamageError is (errors.Is).
var ErrDamaged = errors.New("store damaged")

// DamageError is damage that stops the store from opening, or a read
// that met a page bbolt cannot read. It names the file, the place and the
// commands that describe and recover it.
type DamageError struct {
	Dir    string // the data directory
	File   string // the damaged file's name in Dir
	Offset int64  // where the damage begins in File; -1 when it has no one place
	Detail string
	// Repairable: Repair keeps what is whole; otherwise the file must come
	// from a backup, or be moved aside for an empty store.
	Repairable bool
}

func (e *DamageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s", ErrDamaged, e.File)
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", e.Offset)
	}
	fmt.Fprintf(&b, ": %s. `gateway store check --data-dir %s` describes the damage", e.Detail, e.Dir)
	if e.Repairable {
		fmt.Fprintf(&b, "; `gateway store repair --data-dir %s` keeps what is whole and moves the damaged file aside", e.Dir)
	} else {
		fmt.Fprintf(&b, "; repair cannot rebuild %s: restore it from a backup, or move it aside to start with an empty store", e.File)
	}
	return b.String()
}

func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

// guard runs fn, turning a panic or a fault reading the mapped file into
// a DamageError of the bbolt file: bbolt panics on a page it cannot make
// sense of, and a page number past the file's end is a fault that would
// otherwise kill the process (every restart the same: a crash loop).
func guard(dir string, fn func() error) error { return guardCalling(dir, nil, fn) }

// guardCalling is guard for an fn that calls its caller's code back:
// while *calling is set, a panic is the caller's own and goes on.
func guardCalling(dir string, calling *bool, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if calling != nil && *calling {
			return
		}
		if r := recover(); r != nil {
			err = &DamageError{Dir: dir, File: dbFile, Offset: -1, Detail: fmt.Sprintf("bbolt cannot read it (%v)", r)}
		}
	}()
	return fn()
}

// SegmentReport is one log segment as checkLog found it.
type SegmentReport struct {
	Name    string // the file's name in the data directory
	Size    int64
	Whole   int64 // bytes of whole records from its start; where the damage begins if less than Size
	Records int   // whole records before the damage
	// TornTail: the bytes after Whole are a torn tail, which opening the
	// store cuts off. Otherwise, when Whole < Size, the segment is damaged.
	TornTail bool
	// After the damage: the offset of the first whole record found (-1:
	// none), and the whole records from there on (each read from the one
	// before, as replay would).
	NextWhole    int64
	RecordsAfter int
	// Unsure: the search for a whole record after the damage gave up (see
	// maxSearchHash); the damage is not taken for a torn tail.
	Unsure bool
}

// Damaged reports whether the segment holds damage that is not a torn tail.
func (r SegmentReport) Damaged() bool { return r.Whole < r.Size && !r.TornTail }

func (r SegmentReport) String() string {
	switch {
	case r.Whole == r.Size:
		return fmt.Sprintf("%s: whole, %d records, %d bytes", r.Name, r.Records, r.Size)
	case r.TornTail:
		return fmt.Sprintf("%s: torn tail at offset %d (%d bytes after %d whole records), which opening the store drops",
			r.Name, r.Whole, r.Size-r.Whole, r.Records)
	}
	return fmt.Sprintf("%s: damaged at offset %d, %s", r.Name, r.Whole, r.damage())
}

// damage describes a damaged segment from its first bad record on.
func (r SegmentReport) damage() string {
	s := fmt.Sprintf("after %d whole records; %d bytes from there on", r.Records, r.Size-r.Whole)
	switch {
	case r.Unsure:
		s += ", not searched to the end for whole records"
	case r.NextWhole >= 0:
		s += fmt.Sprintf(", in which %d whole records begin at offset %d", r.RecordsAfter, r.NextWhole)
	}
	return s
}

// maxSearchHash bounds the bytes checksummed while looking for a whole
// record after a bad one: bytes that are not records rarely get as far as
// the checksum, but a segment of small binary values could make the search
// quadratic. Past it the damage is not taken for a torn tail: opening
// stops and Repair decides, which is safe either way.
const maxSearchHash = 256 << 20

// nextWholeRecord returns the first offset after from where a whole record
// begins (-1: none), and false when it gave up (maxSearchHash).
func nextWholeRecord(data []byte, from int) (int, bool) {
	var hashed int64
	for off := from + 1; off+walHeader < len(data); off++ {
		if _, ok := recordAt(data[off:], &hashed); ok {
			return off, true
		}
		if hashed > maxSearchHash {
			return off, false
		}
	}
	return -1, true
}

// checkSegment reads one segment; last: it is the newest, whose tail a
// crash may have torn.
func checkSegment(data []byte, name string, last bool) SegmentReport {
	r := SegmentReport{Name: name, Size: int64(len(data)), NextWhole: -1}
	whole, _ := readRecords(data, func([]byte) error { r.Records++; return nil })
	r.Whole = int64(whole)
	if whole == len(data) {
		return r
	}
	next, sure := nextWholeRecord(data, whole)
	r.Unsure = !sure
	if sure && next >= 0 {
		r.NextWhole = int64(next)
		_, _ = readRecords(data[next:], func([]byte) error { r.RecordsAfter++; return nil })
	}
	r.TornTail = last && sure && next < 0
	return r
}

// checkLog reads every segment of dir's log, oldest first.
func checkLog(dir string) ([]SegmentReport, error) {
	seqs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	out := make([]SegmentReport, 0, len(seqs))
	for i, seq := range seqs {
		path := segmentPath(dir, seq)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		out = append(out, checkSegment(data, filepath.Base(path), i == len(seqs)-1))
	}
	return out, nil
}

// logDamage is the first damaged segment's error, or nil.
func logDamage(dir string, segs []SegmentReport) error {
	for i, r := range segs {
		if !r.Damaged() {
			continue
		}
		d := "a log record that does not hold, " + r.damage()
		if n := len(segs) - i - 1; n > 0 {
			d += fmt.Sprintf("; %d newer segments after it", n)
		}
		return &DamageError{Dir: dir, File: r.Name, Offset: r.Whole, Repairable: true,
			Detail: d + "; replaying what follows the damage would apply later writes without the ones lost, so the store does not open"}
	}
	return nil
}

// cutTornTail truncates the newest segment to its whole records, when its
// tail is torn, and returns it (nil: nothing was cut).
func cutTornTail(dir string, segs []SegmentReport) (*SegmentReport, error) {
	if len(segs) == 0 || !segs[len(segs)-1].TornTail {
		return nil, nil
	}
	r := &segs[len(segs)-1]
	f, err := os.OpenFile(filepath.Join(dir, r.Name), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(r.Whole); err != nil {
		return nil, err
	}
	return r, f.Sync()
}

// bbolt's meta pages, as its file format lays them out: a page header of
// 16 bytes, then magic, version, page size, flags (u32 each), the root
// bucket (root page, sequence), the freelist's page, the high-water page,
// the transaction id (u64 each) and an FNV-64a checksum of the fields
// before it.
const (
	pageHeader   = 16
	metaMagic    = 0xED0CDAED
	metaVersion  = 2
	metaTxid     = 48
	metaChecksum = 56
)

// MetaReport is one of bbolt's two meta pages.
type MetaReport struct {
	Page  int
	Valid bool
	Txid  uint64 // as the page reads, valid or not
}

// readMeta reads the meta page in buf (a page from its start).
func readMeta(buf []byte, page int) (MetaReport, uint32) {
	m := buf[pageHeader:]
	r := MetaReport{Page: page, Txid: binary.LittleEndian.Uint64(m[metaTxid:])}
	h := fnv.New64a()
	h.Write(m[:metaChecksum])
	r.Valid = binary.LittleEndian.Uint32(m[0:]) == metaMagic && binary.LittleEndian.Uint32(m[4:]) == metaVersion &&
		binary.LittleEndian.Uint64(m[metaChecksum:]) == h.Sum64()
	return r, binary.LittleEndian.Uint32(m[8:])
}

// checkMeta reads the meta pages of the bbolt file at path (ok: there is
// none). bbolt itself, finding one damaged, silently takes the other: the
// transaction before, so a damaged newer page drops the last checkpoint.
func checkMeta(path string) ([2]MetaReport, error) {
	whole := [2]MetaReport{{0, true, 0}, {1, true, 0}}
	var out [2]MetaReport
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return whole, nil
	}
	if err != nil {
		return out, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() == 0 {
		return whole, err // empty: bbolt writes its first pages
	}
	buf := make([]byte, pageHeader+metaChecksum+8)
	// read reads the meta page at off; a file too short to hold it has
	// none there.
	read := func(off int64, page int) (MetaReport, uint32, error) {
		clear(buf)
		if _, err := f.ReadAt(buf, off); err != nil {
			if errors.Is(err, io.EOF) {
				return MetaReport{Page: page}, 0, nil
			}
			return MetaReport{}, 0, fmt.Errorf("%s: %w", path, err)
		}
		m, ps := readMeta(buf, page)
		return m, ps, nil
	}
	var pageSize uint32
	if out[0], pageSize, err = read(0, 0); err != nil {
		return out, err
	}
	if !out[0].Valid {
		// The page size is in the damaged page: look for the second meta
		// page where bbolt would (1 KiB to 16 MiB).
		pageSize = 1024
		for ps := uint32(1024); ps <= 16<<20; ps *= 2 {
			if m, _, err := read(int64(ps), 1); err != nil || m.Valid {
				pageSize = ps
				break
			}
		}
	}
	out[1], _, err = read(int64(pageSize), 1)
	return out, err
}

// metaDamage is the error of a damaged meta page, or nil.
func metaDamage(dir string, metas [2]MetaReport) error {
	for i, m := range metas {
		if m.Valid {
			continue
		}
		other := metas[1-i]
		d := fmt.Sprintf("meta page %d is damaged", m.Page)
		if other.Valid {
			d += fmt.Sprintf("; bbolt would go on from meta page %d (transaction %d)", other.Page, other.Txid)
			if m.Txid > other.Txid {
				d += fmt.Sprintf(", dropping the damaged page's newer transaction (it reads %d) and what it wrote", m.Txid)
			} else {
				d += ", the damaged page's transaction reads as the older one: nothing may be lost, but it cannot be told for sure"
			}
			return &DamageError{Dir: dir, File: dbFile, Offset: int64(m.Page), Repairable: true, Detail: d}
		}
		return &DamageError{Dir: dir, File: dbFile, Offset: -1, Detail: "both meta pages are damaged"}
	}
	return nil
}

// openDB opens the bbolt file, a panic or a fault an error (guard).
func openDB(dir string, opts *bolt.Options) (*bolt.DB, error) {
	var db *bolt.DB
	err := guard(dir, func() error {
		var err error
		db, err = bolt.Open(filepath.Join(dir, dbFile), 0o600, opts)
		return err
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%s is in use (is a gateway running on it?)", filepath.Join(dir, dbFile))
	}
	var de *DamageError
	if err != nil && !errors.As(err, &de) && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
		// bbolt's own refusals (invalid or mismatched meta pages, a bad
		// page size) are damage too.
		err = &DamageError{Dir: dir, File: dbFile, Offset: -1, Detail: err.Error()}
	}
	return db, err
}

// Report is what Check found in a data directory.
type Report struct {
	Dir      string
	Segments []SegmentReport
	Meta     [2]MetaReport
	// DBErrors are the bbolt file's problems: bbolt's consistency check
	// (tx.Check), or why it could not be opened.
	DBErrors []string
	NoDB     bool // no bbolt file yet
}

// Whole reports whether the store opens as it is, losing nothing but a
// torn tail.
func (r *Report) Whole() bool {
	for _, s := range r.Segments {
		if s.Damaged() {
			return false
		}
	}
	return r.Meta[0].Valid && r.Meta[1].Valid && len(r.DBErrors) == 0
}

// Write describes the report, one line a file or a problem.
func (r *Report) Write(w io.Writer) {
	switch {
	case r.NoDB:
		fmt.Fprintf(w, "%s: none yet\n", dbFile)
	case len(r.DBErrors) == 0 && r.Meta[0].Valid && r.Meta[1].Valid:
		fmt.Fprintf(w, "%s: whole (meta pages at transactions %d and %d)\n", dbFile, r.Meta[0].Txid, r.Meta[1].Txid)
	}
	if err := metaDamage(r.Dir, r.Meta); err != nil {
		fmt.Fprintf(w, "%s: %s\n", dbFile, err.(*DamageError).Detail)
	}
	for _, e := range r.DBErrors {
		fmt.Fprintf(w, "%s: %s\n", dbFile, e)
	}
	if len(r.Segments) == 0 {
		fmt.Fprintln(w, "log: no segments (the last process closed the store)")
	}
	for _, s := range r.Segments {
		fmt.Fprintln(w, s.String())
	}
}

// maxCheckErrors bounds the bbolt check's findings kept in a report.
const maxCheckErrors = 20

// Check reads the store in dir without changing it: every log segment,
// the bbolt file's meta pages and, when they hold, bbolt's consistency
// check of every page. The store must not be open (a running gateway
// holds the file's lock: Check then fails).
func Check(dir string) (*Report, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	r := &Report{Dir: dir}
	var err error
	if r.Segments, err = checkLog(dir); err != nil {
		return nil, err
	}
	if r.Meta, err = checkMeta(filepath.Join(dir, dbFile)); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, dbFile)); errors.Is(err, os.ErrNotExist) {
		r.NoDB = true
		return r, nil
	}
	if !r.Meta[0].Valid && !r.Meta[1].Valid {
		return r, nil
	}
	// Not read-only, though nothing is written: a read-only bbolt loads
	// its freelist in the goroutine of tx.Check, out of guard's reach.
	db, err := openDB(dir, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return r.damage(err)
	}
	defer db.Close()
	err = guard(dir, func() error {
		return db.View(func(tx *bolt.Tx) error {
			// bbolt's check runs in a goroutine of its own, where a page
			// past the file's end is a fault that kills the process: every
			// page of the buckets is read here first, under guard.
			if err := walkBuckets(tx); err != nil {
				return err
			}
			for e := range tx.Check() {
				if len(r.DBErrors) < maxCheckErrors {
					r.DBErrors = append(r.DBErrors, e.Error())
				}
			}
			return nil
		})
	})
	if err != nil {
		return r.damage(err)
	}
	return r, nil
}

// damage notes a DamageError of the bbolt file in the report; any other
// error is Check's.
func (r *Report) damage(err error) (*Report, error) {
	var de *DamageError
	if !errors.As(err, &de) {
		return nil, err
	}
	r.DBErrors = append(r.DBErrors, de.Detail)
	return r, nil
}

// walkBuckets reads every key and value of every bucket.
func walkBuckets(tx *bolt.Tx) error {
	var sink byte
	return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if len(v) > 0 {
				sink ^= v[len(v)-1]
			}
			return nil
		})
	})
}

// Repaired says what Repair did.
type Repaired struct {
	Actions []string
}

// Repair makes the store in dir open again, keeping what can be proven
// whole and moving the damaged files aside (never deleting them):
//
//   - a damaged log segment: the whole records before the damage stay;
//     the segment as it was, and every newer segment, are renamed to
//     NAME.damaged-TIME. Whole records after the damage are not replayed:
//     applied without the ones lost before them, they could contradict
//     them (a settlement without its reservation).
//   - a torn tail: cut off, as opening would.
//   - a damaged meta page: bbolt's other meta page is kept (the
//     transaction before), and empty transactions rewrite the damaged one.
//
// A bbolt file whose pages are damaged is not rebuilt: Repair fails, and
// the file must come from a backup or be moved aside.
func Repair(dir string) (*Repaired, error) {
	r, err := Check(dir)
	if err != nil {
		return nil, err
	}
	out := &Repaired{}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	for i, s := range r.Segments {
		if !s.Damaged() {
			continue
		}
		// Newer segments first: were the repair cut short before the
		// damaged one is cut, the store still refuses to open, and never
		// replays a newer segment over the gap.
		for _, newer := range r.Segments[i+1:] {
			backup, err := moveAside(dir, newer.Name, stamp)
			if err != nil {
				return out, err
			}
			out.Actions = append(out.Actions, fmt.Sprintf("%s: a newer segment after the damage, %d records (%d bytes) not replayed; moved to %s",
				newer.Name, newer.Records, newer.Size, backup))
		}
		backup, err := keepWholePrefix(dir, s, stamp)
		if err != nil {
			return out, err
		}
		out.Actions = append(out.Actions, fmt.Sprintf("%s: kept %d whole records (%d bytes); dropped %d bytes from offset %d%s; the segment as it was is in %s",
			s.Name, s.Records, s.Whole, s.Size-s.Whole, s.Whole, afterDamage(s), backup))
		r.Segments = r.Segments[:i+1]
		r.Segments[i].TornTail = false
		break
	}
	if cut, err := cutTornTail(dir, r.Segments); err != nil {
		return out, err
	} else if cut != nil {
		out.Actions = append(out.Actions, fmt.Sprintf("%s: cut off a torn tail of %d bytes at offset %d", cut.Name, cut.Size-cut.Whole, cut.Whole))
	}
	if len(r.DBErrors) > 0 {
		return out, &DamageError{Dir: dir, File: dbFile, Offset: -1, Detail: strings.Join(r.DBErrors, "; ")}
	}
	if err := metaDamage(dir, r.Meta); err != nil {
		if !r.Meta[0].Valid && !r.Meta[1].Valid {
			return out, err
		}
		if err := rewriteMeta(dir); err != nil {
			return out, err
		}
		out.Actions = append(out.Actions, fmt.Sprintf("%s: %s; rewrote it from the other", dbFile, err.(*DamageError).Detail))
	}
	if err := syncDir(dir); err != nil {
		return out, err
	}
	return out, nil
}

func afterDamage(s SegmentReport) string {
	if s.RecordsAfter > 0 {
		return fmt.Sprintf(" (%d whole records after the damage among them)", s.RecordsAfter)
	}
	return ""
}

// asideName is a name for a damaged file moved aside, NAME.damaged-STAMP
// (which the log does not read), not yet taken in dir.
func asideName(dir, name, stamp string) string {
	backup := name + ".damaged-" + stamp
	for n := 2; ; n++ {
		if _, err := os.Lstat(filepath.Join(dir, backup)); errors.Is(err, os.ErrNotExist) {
			return backup
		}
		backup = fmt.Sprintf("%s.damaged-%s-%d", name, stamp, n)
	}
}

// moveAside renames a file of dir (asideName) and returns its new name.
func moveAside(dir, name, stamp string) (string, error) {
	backup := asideName(dir, name, stamp)
	return backup, os.Rename(filepath.Join(dir, name), filepath.Join(dir, backup))
}

// keepWholePrefix replaces a damaged segment with its whole records: a
// copy of the original is kept aside, and the prefix replaces it under its
// name at once (a rename), so that a crash leaves one or the other.
func keepWholePrefix(dir string, s SegmentReport, stamp string) (string, error) {
	path := filepath.Join(dir, s.Name)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	backup := asideName(dir, s.Name, stamp)
	if err := writeSynced(filepath.Join(dir, backup), data); err != nil {
		return "", err
	}
	tmp := path + ".repair"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := writeSynced(tmp, data[:s.Whole]); err != nil {
		return "", err
	}
	return backup, os.Rename(tmp, path)
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// rewriteMeta commits empty transactions until both meta pages hold:
// bbolt writes transaction n's meta to page n%2, so one or two commits
// overwrite the damaged page from the transaction bbolt kept.
func rewriteMeta(dir string) error {
	db, err := openDB(dir, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	for range 2 {
		if err = guard(dir, func() error { return db.Update(func(*bolt.Tx) error { return nil }) }); err != nil {
			break
		}
		var metas [2]MetaReport
		if metas, err = checkMeta(filepath.Join(dir, dbFile)); err != nil || metaDamage(dir, metas) == nil {
			break
		}
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	metas, err := checkMeta(filepath.Join(dir, dbFile))
	if err != nil {
		return err
	}
	return metaDamage(dir, metas)
}
