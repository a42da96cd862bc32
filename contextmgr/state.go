package contextmgr

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc64"
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
