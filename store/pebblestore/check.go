package pebblestore

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/haltline/haltline/store"
)

// Report is what Check found.
type Report struct {
	Points     int64 // keys and tombstones in the tables and the log
	Tombstones int
	Records    map[store.Bucket]int // live records a bucket
}

// Write describes the report.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "pebble: %d points, %d tombstones\n", r.Points, r.Tombstones)
	for _, b := range store.AllBuckets {
		fmt.Fprintf(w, "  %-13s %d records\n", b, r.Records[b])
	}
}

// Check opens the database in dir read only — Pebble replays its log, a
// torn tail of the newest log file dropped — and reads every key of every
// level and of the log, each block's checksum checked and the levels'
// order with it. It changes nothing; damage is an error
// (pebble.IsCorruptionError(err)). Pebble has no repair: a store it
// finds damaged comes from a backup, or goes aside for an empty one.
func Check(dir string) (*Report, error) {
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, ErrorIfNotExists: true, Logger: quiet{}})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var st pebble.CheckLevelsStats
	if err := db.CheckLevels(&st); err != nil {
		return nil, err
	}
	r := &Report{Points: st.NumPoints, Tombstones: st.NumTombstones, Records: map[store.Bucket]int{}}
	s := &Store{db: db}
	for _, b := range store.AllBuckets {
		err := s.Scan(b, func(_, _ []byte) error { r.Records[b]++; return nil })
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// quiet drops Pebble's messages: Check's errors say what matters.
type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("store: "+format, args...))
}
