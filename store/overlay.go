package store

import (
	"bytes"
	"slices"
	"strings"
	"unsafe"
)

// overlay holds the writes that are in the log but not yet in the bbolt
// file, so that reads see every committed write. A nil value is a delete.
type overlay struct {
	buckets map[Bucket]map[string][]byte
	// byRun groups a bucket's keys that begin with a run id (up to their
	// first NUL: events, stored tool results), so that a scan of one run's
	// keys reads them and not every key the overlay holds (up to a
	// checkpoint's worth): a run's timeline, its results as it is loaded,
	// the retention sweep's deletes.
	byRun map[Bucket]map[string][]string
	ops   int // distinct keys
	// bytes estimates the memory the overlay holds: its keys, its values'
	// arrays (the callers' slices, kept whole) and entryBytes a key.
	bytes int64
}

// entryBytes is an overlay entry's cost besides its key's and its value's
// bytes: the map's slot (a string and a slice header, its share of the
// buckets) and the key's place in byRun.
const entryBytes = 80

func newOverlay() *overlay {
	return &overlay{buckets: map[Bucket]map[string][]byte{}, byRun: map[Bucket]map[string][]string{}}
}

// next returns an empty overlay whose buckets are sized for as many keys
// as o holds: the next checkpoint period takes about as many, and a map
// growing from empty rehashes every key several times on the call path.
func (o *overlay) next() *overlay {
	n := &overlay{buckets: make(map[Bucket]map[string][]byte, len(o.buckets)), byRun: make(map[Bucket]map[string][]string, len(o.byRun))}
	for b, m := range o.buckets {
		n.buckets[b] = make(map[string][]byte, len(m))
	}
	for b, m := range o.byRun {
		n.byRun[b] = make(map[string][]string, len(m))
	}
	return n
}

func (o *overlay) apply(batches [][]Op) {
	for _, ops := range batches {
		for _, op := range ops {
			o.put(op)
		}
	}
}

// put records one write; a later one of the same key replaces it.
func (o *overlay) put(op Op) {
	m := o.buckets[op.Bucket]
	if m == nil {
		m = map[string][]byte{}
		o.buckets[op.Bucket] = m
	}
	// The key's bytes are the caller's, handed over with the op
	// (Store.Apply): kept as they are, not copied.
	n := len(m)
	key := unsafe.String(unsafe.SliceData(op.Key), len(op.Key))
	old := m[key]
	m[key] = op.Value
	o.bytes += int64(cap(op.Value) - cap(old))
	if len(m) == n {
		return // a rewrite: the first write's key stays
	}
	o.ops++
	o.bytes += int64(len(key)) + entryBytes
	if i := strings.IndexByte(key, 0); i >= 0 {
		g := o.byRun[op.Bucket]
		if g == nil {
			g = map[string][]string{}
			o.byRun[op.Bucket] = g
		}
		g[key[:i+1]] = append(g[key[:i+1]], key)
	}
}

// get reports the overlay's value of key: found is false when the overlay
// does not know the key, value is nil for a delete.
func (o *overlay) get(b Bucket, key []byte) (value []byte, found bool) {
	value, found = o.buckets[b][string(key)]
	return value, found
}

// kv is one record of a merged scan.
type kv struct {
	key   string
	value []byte // nil: deleted
}

// layered returns the records of the overlays (oldest first, later ones
// win) under prefix, sorted by key.
func layered(layers []*overlay, b Bucket, prefix []byte) []kv {
	var merged map[string][]byte
	pre := string(prefix)
	if pre != "" && strings.IndexByte(pre, 0) == len(pre)-1 {
		// A run's keys (see overlay.byRun).
		for _, o := range layers {
			m := o.buckets[b]
			for _, k := range o.byRun[b][pre] {
				if merged == nil {
					merged = map[string][]byte{}
				}
				merged[k] = m[k]
			}
		}
		return sortedKV(merged)
	}
	for _, o := range layers {
		for k, v := range o.buckets[b] {
			if !strings.HasPrefix(k, pre) {
				continue
			}
			if merged == nil {
				merged = map[string][]byte{}
			}
			merged[k] = v
		}
	}
	return sortedKV(merged)
}

// sortedKV returns the records of merged sorted by key.
func sortedKV(merged map[string][]byte) []kv {
	out := make([]kv, 0, len(merged))
	for k, v := range merged {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	return out
}

// mergeScan walks the sorted overlay records and a sorted base cursor
// together: the overlay wins on equal keys, and its deletes hide the base.
func mergeScan(over []kv, next func() (k, v []byte), fn func(k, v []byte) error) error {
	k, v := next()
	for k != nil || len(over) > 0 {
		switch {
		case len(over) > 0 && (k == nil || bytes.Compare([]byte(over[0].key), k) <= 0):
			if k != nil && over[0].key == string(k) {
				k, v = next()
			}
			o := over[0]
			over = over[1:]
			if o.value != nil {
				if err := fn([]byte(o.key), o.value); err != nil {
					return err
				}
			}
		default:
			if err := fn(k, v); err != nil {
				return err
			}
			k, v = next()
		}
	}
	return nil
}
