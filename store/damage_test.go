package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// records encodes one record a key, each a put of Runs.
func records(t *testing.T, keys ...string) (data []byte, offsets []int) {
	t.Helper()
	for _, k := range keys {
		offsets = append(offsets, len(data))
		var err error
		if data, err = appendRecord(data, [][]Op{{put(Runs, k, "v-"+k)}}); err != nil {
			t.Fatal(err)
		}
	}
	return data, offsets
}

func writeSegment(t *testing.T, dir string, seq uint64, data []byte) string {
	t.Helper()
	path := segmentPath(dir, seq)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(path)
}

// openLogged opens the store with its warnings in a buffer.
func openLogged(t *testing.T, dir string) (*Bolt, *bytes.Buffer, error) {
	t.Helper()
	var logs bytes.Buffer
	s, err := OpenBoltWith(dir, BoltOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	return s, &logs, err
}

func runKeys(t *testing.T, s *Bolt) string {
	t.Helper()
	var keys []string
	for _, kv := range collect(t, s, Runs, nil) {
		keys = append(keys, strings.SplitN(kv, "=", 2)[0])
	}
	return strings.Join(keys, ",")
}

// A torn tail of the newest segment (a record cut short, or zeros where a
// crash extended the file but its data never landed) is cut off with a
// warning naming the segment, the offset and the bytes; the records before
// it are replayed. An older segment, whole, is replayed too.
func TestTornTailIsCutWithAWarning(t *testing.T) {
	t.Parallel()
	data, offs := records(t, "a", "b", "c")
	for name, tail := range map[string][]byte{
		"cut short":  data[:len(data)-3],
		"zeros":      append(bytes.Clone(data[:offs[2]]), make([]byte, 300)...),
		"bad header": append(bytes.Clone(data[:offs[2]]), 0xff, 0xff, 0xff, 0x7f, 1, 2),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			older, _ := records(t, "0")
			writeSegment(t, dir, 1, older)
			seg := writeSegment(t, dir, 2, tail)
			s, logs, err := openLogged(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := runKeys(t, s); got != "0,a,b" {
				t.Fatalf("after the cut: %s, want 0,a,b", got)
			}
			want := fmt.Sprintf("segment=%s offset=%d bytes=%d", seg, offs[2], len(tail)-offs[2])
			if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, want) {
				t.Fatalf("warning %q lacks %q", l, want)
			}
		})
	}
}

// A bad record with whole records after it, or at the end of a segment
// that is not the newest, is damage: the store does not open, the error
// names the segment, the offset and the commands, and nothing of the log
// reaches the bbolt file. Repair keeps the records before the damage,
// keeps the damaged segment aside, and the store opens.
func TestDamageBeforeTheTailStopsTheOpenUntilRepaired(t *testing.T) {
	t.Parallel()
	data, offs := records(t, "a", "b", "c", "d")
	cases := map[string]func(dir string) (seg string, offset int, keep string){
		"a flipped byte mid-segment": func(dir string) (string, int, string) {
			bad := bytes.Clone(data)
			bad[offs[1]+walHeader+2] ^= 0xff
			return writeSegment(t, dir, 1, bad), offs[1], "a"
		},
		"a broken length mid-segment": func(dir string) (string, int, string) {
			bad := bytes.Clone(data)
			binary.LittleEndian.PutUint32(bad[offs[2]:], 1<<20)
			return writeSegment(t, dir, 1, bad), offs[2], "a,b"
		},
		"a torn record in an older segment": func(dir string) (string, int, string) {
			seg := writeSegment(t, dir, 1, data[:len(data)-2])
			newer, _ := records(t, "e")
			writeSegment(t, dir, 2, newer)
			return seg, offs[3], "a,b,c"
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			seg, offset, keep := damage(dir)
			original, _ := os.ReadFile(filepath.Join(dir, seg))
			_, _, err := openLogged(t, dir)
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("open over damage: %v", err)
			}
			for _, want := range []string{seg, fmt.Sprintf("offset %d", offset), "gateway store check --data-dir " + dir,
				"gateway store repair --data-dir " + dir} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q lacks %q", err, want)
				}
			}
			rep, err := Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Whole() {
				t.Fatal("check finds the store whole")
			}

			done, err := Repair(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.Join(done.Actions, "\n"), fmt.Sprintf("dropped %d bytes from offset %d", len(original)-offset, offset)) {
				t.Fatalf("repair says %q", done.Actions)
			}
			backups, _ := filepath.Glob(filepath.Join(dir, seg+".damaged-*"))
			if len(backups) != 1 {
				t.Fatalf("backups of %s: %v", seg, backups)
			}
			if kept, _ := os.ReadFile(backups[0]); !bytes.Equal(kept, original) {
				t.Fatal("the damaged segment was not kept as it was")
			}
			if rep, err := Check(dir); err != nil || !rep.Whole() {
				t.Fatalf("check after repair: %v %+v", err, rep)
			}
			s, _, err := openLogged(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := runKeys(t, s); got != keep {
				t.Fatalf("after repair: %s, want %s", got, keep)
			}
		})
	}
}

// boltFile writes n runs through the store and closes it, so that they
// are in the bbolt file, and returns the file's bytes and page size.
func boltFile(t *testing.T, dir string, n int) ([]byte, int) {
	t.Helper()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		mustApply(t, s, put(Runs, fmt.Sprintf("run-%05d", i), strings.Repeat("x", 100)))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	return data, int(binary.LittleEndian.Uint32(data[pageHeader+8:]))
}

// A damaged page of the bbolt file is an error, at open or at the read
// that meets it, never a panic or a fault that ends the process; check
// reports it.
func TestDamagedBoltPageIsAnErrorNotACrash(t *testing.T) {
	t.Parallel()
	const leafFlag, branchFlag = 0x02, 0x01
	for name, damage := range map[string]func(page []byte){
		// A leaf that is not what bbolt expects: it panics.
		"leaf overwritten": func(page []byte) {
			if binary.LittleEndian.Uint16(page[8:]) == leafFlag {
				copy(page, bytes.Repeat([]byte{0xa5}, 64))
			}
		},
		// A branch pointing past the file: reading it is a fault.
		"branch out of range": func(page []byte) {
			if binary.LittleEndian.Uint16(page[8:]) == branchFlag {
				binary.LittleEndian.PutUint64(page[pageHeader+8:], 1<<28)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			data, ps := boltFile(t, dir, 2000)
			for p := 2; p*ps < len(data); p++ {
				damage(data[p*ps : (p+1)*ps])
			}
			if err := os.WriteFile(filepath.Join(dir, dbFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenBolt(dir)
			if err == nil {
				defer s.Close()
				err = s.Scan(Runs, func(k, v []byte) error { return nil })
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), dbFile) {
				t.Fatalf("damaged bbolt file: %v", err)
			}
			if s != nil {
				s.Close()
			}
			rep, err := Check(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Whole() || len(rep.DBErrors) == 0 {
				t.Fatalf("check: %+v", rep)
			}
		})
	}
}

// A damaged meta page, which bbolt would silently step over (to the
// transaction before it), stops the open; repair rewrites it from the
// other and says what the older transaction lacks.
func TestDamagedMetaPageStopsTheOpenUntilRepaired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put(Runs, "a", "1"))
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put(Runs, "b", "1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, dbFile)
	metas, err := checkMeta(path)
	if err != nil || metas[0].Txid == metas[1].Txid {
		t.Fatal(metas, err)
	}
	newest := metas[0]
	if metas[1].Txid > newest.Txid {
		newest = metas[1]
	}
	data, _ := os.ReadFile(path)
	ps := int(binary.LittleEndian.Uint32(data[pageHeader+8:]))
	data[newest.Page*ps+pageHeader+metaChecksum] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	_, err = OpenBolt(dir)
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), fmt.Sprintf("meta page %d is damaged", newest.Page)) ||
		!strings.Contains(err.Error(), "gateway store repair") {
		t.Fatalf("open over a damaged meta page: %v", err)
	}
	done, err := Repair(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a := strings.Join(done.Actions, "\n"); !strings.Contains(a, "newer transaction") || !strings.Contains(a, "rewrote") {
		t.Fatalf("repair says %q", done.Actions)
	}
	if metas, err := checkMeta(path); err != nil || !metas[0].Valid || !metas[1].Valid {
		t.Fatalf("meta pages after repair: %+v %v", metas, err)
	}
	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := runKeys(t, s); got != "a" {
		t.Fatalf("after repair: %s, want the older transaction's a", got)
	}
}

// The search for a whole record after a bad one finds one at any offset,
// not only where the bad record's length says the next begins.
func TestNextWholeRecord(t *testing.T) {
	data, offs := records(t, "a", "b")
	junk := append([]byte{0, 0, 0, 0, 9, 9, 9}, data[offs[1]:]...)
	if off, sure := nextWholeRecord(junk, 0); !sure || off != 7 {
		t.Fatalf("found %d (%v), want 7", off, sure)
	}
	if off, sure := nextWholeRecord(data[:len(data)-1], offs[1]); !sure || off != -1 {
		t.Fatalf("found %d (%v) in a cut record", off, sure)
	}
}

// An empty bbolt file (created, then a crash before bbolt wrote its first
// pages) is not damage: bbolt writes them; one too short for its meta
// pages is.
func TestEmptyAndShortBoltFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, dbFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, dbFile), []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBolt(dir); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "both meta pages") {
		t.Fatalf("open of a short file: %v", err)
	}
}
