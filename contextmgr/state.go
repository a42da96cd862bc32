package contextmgr

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc64"
	"hash/maphash"
	"maps"
	"slices"
	"sync"

	"github.com/haltline/haltline/wire"
)

// State is what a run remembers between calls so that every rewritten
// request of the run starts with the same bytes until the next compression
// (prompt caches key on the prefix). Keep one per run, pass the same
// pointer to every Rewrite of the run, and persist it as JSON with the
// run's other state. The zero value is a run that was never compressed.
type State struct {
	// CutEnd is the index, in the agent's history, of the first item kept
	// after the dropped range; 0 when nothing was dropped yet. Items
	// [head, CutEnd) are dropped, system items among them excepted.
	CutEnd int `json:"cut_end,omitempty"`
	// CutHash identifies the history items [0, CutEnd) the cut was made on
	// (a hash of what they say, not of their bytes); a history that no
	// longer starts with them is compressed afresh.
	CutHash string `json:"cut_hash,omitempty"`
	// LastDropped names the last dropped item: its tool-call id when it has
	// one, else its role and index.
	LastDropped string `json:"last_dropped,omitempty"`
	// Summary is the text that stands in for the dropped turns.
	Summary string `json:"summary,omitempty"`
	// SummaryBy is "extractive" or "summariser".
	SummaryBy string `json:"summary_by,omitempty"`
	// Facts are the pinned facts, in the order they were learnt. A fact is
	// never overwritten or removed by a later compression.
	Facts []Fact `json:"facts,omitempty"`
	// Dropped counts the items currently replaced by the summary.
	Dropped int `json:"dropped,omitempty"`
	// Compressions counts the compressions of the run.
	Compressions int `json:"compressions,omitempty"`
	// Blobs maps a hash of a cut tool output to the handle its full text was
	// stored under, so that a result cut on one call is cut into the same
	// bytes (and stored once) on every later call.
	Blobs map[string]string `json:"blobs,omitempty"`

	// memo remembers, in this process only, the bytes the cut was last
	// verified on (see prefixMemo).
	memo prefixMemo
}

// Clone returns a copy that shares nothing with s: a dry run (shadow mode)
// may rewrite with it and leave s as it was.
func (s *State) Clone() *State {
	c := *s
	c.Facts = slices.Clone(s.Facts)
	c.Blobs = maps.Clone(s.Blobs)
	return &c
}

// prefixMemo lets a call that re-sends its history byte for byte skip
// hashing the identities of the dropped items: identical bytes read into
// identical items. It is keyed on the cut it vouches for, so a State
// copied, edited or restored from JSON (where it is absent) falls back to
// the identities.
type prefixMemo struct {
	api     wire.API
	cutEnd  int
	cutHash string
	n       int    // length of the bytes of items [0, cutEnd)
	sum     uint64 // their maphash
}

// memoSeed keys the memo's hashes; they never leave the process.
var memoSeed = maphash.MakeSeed()

// prefixBytes returns the bytes of items [0, n) of a conversation the
// reader read, or nil when they are not one stretch of the body.
func (c *conv) prefixBytes(body []byte, n int) []byte {
	if !c.exact || n <= 0 || n > len(c.items) {
		return nil
	}
	last := &c.items[n-1]
	return body[c.items[0].at : last.at+len(last.raw)]
}

// prefixIs reports whether items [0, n) hash to h as prefixHash does,
// through the memo when the bytes are those it was made on.
func (c *conv) prefixIs(st *State, body []byte, n int, h string) bool {
	b := c.prefixBytes(body, n)
	m := &st.memo
	if b != nil && m.api == c.api && m.cutEnd == n && m.cutHash == h && m.n == len(b) && m.sum == maphash.Bytes(memoSeed, b) {
		return true
	}
	if c.prefixHash(n) != h {
		return false
	}
	c.remember(st, body, n, h)
	return true
}

// remember records that items [0, n) of body hash to h.
func (c *conv) remember(st *State, body []byte, n int, h string) {
	st.memo = prefixMemo{}
	if b := c.prefixBytes(body, n); b != nil {
		st.memo = prefixMemo{api: c.api, cutEnd: n, cutHash: h, n: len(b), sum: maphash.Bytes(memoSeed, b)}
	}
}

// Fact is one pinned fact: a constraint, a confirmed conclusion or a hard
// requirement of the user, injected in the system segment of every
// rewritten request of the run.
type Fact struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// Source is "extractive" (a requirement line of a dropped user
	// message) or "summariser".
	Source string `json:"source"`
}

// hasFact reports whether a fact with key k is pinned.
func (s *State) hasFact(k string) bool {
	for _, f := range s.Facts {
		if f.Key == k {
			return true
		}
	}
	return false
}

// crcTable drives the package's content hashes: CRC-64 is in the standard
// library, stable across processes (a persisted State must match after a
// restart) and several times faster than FNV on long tool outputs.
var crcTable = crc64.MakeTable(crc64.ECMA)

// prefixHash hashes the identities of items [0, n).
func (c *conv) prefixHash(n int) string {
	var h uint64
	var b [8]byte
	for i := range n {
		binary.LittleEndian.PutUint64(b[:], c.identOf(i))
		h = crc64.Update(h, crcTable, b[:])
	}
	binary.BigEndian.PutUint64(b[:], h)
	return hex.EncodeToString(b[:])
}

// textKey hashes a text for State.Blobs, deduplication and fact keys.
func textKey(s string) string {
	return hexKey(crc64.Checksum([]byte(s), crcTable))
}

// hexKey renders a text hash as textKey does.
func hexKey(sum uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], sum)
	return hex.EncodeToString(b[:])
}

// crcAppend returns crc64.Update(h, crcTable, b) from b's own checksum
// (crc64.Update(0, crcTable, b)) and its length. CRC-64 is affine in its
// initial value: Update(h, b) = Update(0, b) XOR Z^n(h), where Z is the
// register's step over one zero byte, so a text hashed once for
// deduplication need not be hashed again inside a prefix identity.
func crcAppend(h, sum uint64, n int) uint64 {
	ops := zeroOps()
	for k := 0; h != 0 && n > 0; k, n = k+1, n>>1 {
		if n&1 == 0 {
			continue
		}
		if k >= len(ops) {
			// Beyond a gigabyte: step over the zeros the slow way.
			for i := 0; i < n<<k; i++ {
				h = crcTable[byte(h)] ^ h>>8
			}
			break
		}
		h = ops[k].apply(h)
	}
	return sum ^ h
}

// gf2op is a linear map on 64-bit registers as tables by nibble: entry
// [j][v] is the image of v<<4j.
type gf2op [16][16]uint64

func (o *gf2op) apply(h uint64) (r uint64) {
	for j := range o {
		r ^= o[j][h>>(4*j)&15]
	}
	return r
}

// zeroOps returns Z^(2^k), k < 30, built once on first use (60 KB).
var zeroOps = sync.OnceValue(func() []gf2op {
	ops := make([]gf2op, 30)
	var col [64]uint64 // images of the unit registers under the current power
	for j := range col {
		e := uint64(1) << j
		col[j] = crcTable[byte(e)] ^ e>>8
	}
	for k := range ops {
		o := &ops[k]
		for j := range 16 {
			for v := range 16 {
				var r uint64
				for bit := range 4 {
					if v>>bit&1 != 0 {
						r ^= col[4*j+bit]
					}
				}
				o[j][v] = r
			}
		}
		for j := range col {
			col[j] = o.apply(o.apply(uint64(1) << j))
		}
	}
	return ops
})
