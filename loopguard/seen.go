package loopguard

import (
	"encoding/binary"
	"math/bits"
)

// MaxSeenObservations bounds how many distinct observations a run remembers.
// When it is full the oldest is forgotten; a forgotten observation seen again
// counts as new, which can only delay a stall verdict, never cause one.
const MaxSeenObservations = 4096

// obsKey is what "already seen" is judged on: the observation together with
// the shape of the call that produced it. "ok" after writing file a and "ok"
// after writing file b are different facts (the run made progress), while
// "no data" after querying offset 100 and again after offset 101 is the same
// fact.
type obsKey [16]byte

func makeObsKey(shape uint64, obs Fingerprint) obsKey {
	var k obsKey
	m := bits.RotateLeft64(shape*0x9E3779B97F4A7C15, 29)
	binary.LittleEndian.PutUint64(k[:8], binary.LittleEndian.Uint64(obs[:8])^shape)
	binary.LittleEndian.PutUint64(k[8:], binary.LittleEndian.Uint64(obs[8:16])^m)
	return k
}

// seenSet is a bounded set with first-in-first-out eviction.
type seenSet struct {
	m     map[obsKey]struct{}
	order []obsKey // insertion order, a ring once full
	head  int      // oldest entry when full
}

// add inserts k and reports whether it was new.
func (s *seenSet) add(k obsKey) bool {
	if s.m == nil {
		s.m = make(map[obsKey]struct{}, 16)
	}
	if _, ok := s.m[k]; ok {
		return false
	}
	if len(s.order) < MaxSeenObservations {
		s.order = append(s.order, k)
	} else {
		delete(s.m, s.order[s.head])
		s.order[s.head] = k
		s.head = (s.head + 1) % MaxSeenObservations
	}
	s.m[k] = struct{}{}
	return true
}

// each calls fn from oldest to newest.
func (s *seenSet) each(fn func(obsKey)) {
	for i := range s.order {
		fn(s.order[(s.head+i)%len(s.order)])
	}
}

func (s *seenSet) len() int { return len(s.order) }
