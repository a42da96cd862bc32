package loopguard

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// State format, version 2 (all integers unsigned varints unless noted):
//
//	"LGv2" seq epoch mark pepoch smark nsteps
//	  per step: seq step(zigzag) epoch pepoch flags ncalls
//	    per call: id(8 bytes LE) fingerprint(24 bytes) flags(1 byte:
//	    1 observed, 2 sketched) [sketch key(8 bytes LE) 32 × min(4 bytes LE)]
//	nseen, per entry: key(16 bytes), oldest first
//
// Version 1, still read, has neither pepoch nor smark nor sketches (the
// call's flags byte is its observed byte): its runs start the semantic
// detector afresh.
//
// Thresholds are not stored: a restored guard uses the ones it was created
// with, so a policy change applies to runs that survive a restart.
const (
	stateMagic   = "LGv2"
	stateMagicV1 = "LGv1"
)

const (
	callObserved = 1 << iota
	callSketched
)

// maxStateSteps bounds what UnmarshalBinary accepts, whatever the input
// claims; the guard then keeps only as many steps as its ring holds.
const maxStateSteps = 4 * maxThreshold

// MarshalBinary encodes the guard's state. Its size is bounded by the ring
// and MaxSeenObservations (under 128 KB at the default thresholds).
func (g *Guard) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 64+g.n*48+g.seen.len()*16)
	b = append(b, stateMagic...)
	b = binary.AppendUvarint(b, g.seq)
	b = binary.AppendUvarint(b, g.epoch)
	b = binary.AppendUvarint(b, g.mark)
	b = binary.AppendUvarint(b, g.pepoch)
	b = binary.AppendUvarint(b, g.smark)
	b = binary.AppendUvarint(b, uint64(g.n))
	for i := 0; i < g.n; i++ {
		s := g.at(i)
		b = binary.AppendUvarint(b, s.seq)
		b = binary.AppendVarint(b, int64(s.step))
		b = binary.AppendUvarint(b, s.epoch)
		b = binary.AppendUvarint(b, s.pepoch)
		var flags byte
		if s.newObs {
			flags = 1
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(s.calls)))
		for _, c := range s.calls {
			b = binary.LittleEndian.AppendUint64(b, c.id)
			b = append(b, c.fp[:]...)
			var cf byte
			if c.observed {
				cf |= callObserved
			}
			if !c.sk.IsZero() {
				cf |= callSketched
			}
			b = append(b, cf)
			if cf&callSketched != 0 {
				b = binary.LittleEndian.AppendUint64(b, c.sk.key)
				for _, m := range c.sk.mins {
					b = binary.LittleEndian.AppendUint32(b, m)
				}
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(g.seen.len()))
	g.seen.each(func(k obsKey) { b = append(b, k[:]...) })
	return b, nil
}

type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("loopguard: truncated or malformed state")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errors.New("loopguard: truncated or malformed state")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = errors.New("loopguard: truncated state")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// UnmarshalBinary restores state written by MarshalBinary. On error the
// guard is left unchanged.
func (g *Guard) UnmarshalBinary(data []byte) error {
	r := &stateReader{b: data}
	var v2 bool
	switch string(r.bytes(len(stateMagic))) {
	case stateMagic:
		v2 = true
	case stateMagicV1:
	default:
		return errors.New("loopguard: not a guard state")
	}
	seq, epoch, mark := r.uvarint(), r.uvarint(), r.uvarint()
	var pepoch, smark uint64
	if v2 {
		pepoch, smark = r.uvarint(), r.uvarint()
	}
	nsteps := r.uvarint()
	if r.err == nil && nsteps > maxStateSteps {
		return fmt.Errorf("loopguard: state has %d steps, limit %d", nsteps, maxStateSteps)
	}
	steps := make([]stepRec, 0, min(nsteps, maxStateSteps))
	var prevSeq uint64
	for i := uint64(0); i < nsteps && r.err == nil; i++ {
		s := stepRec{seq: r.uvarint(), step: int(r.varint()), epoch: r.uvarint()}
		if v2 {
			s.pepoch = r.uvarint()
		}
		flags := r.bytes(1)
		ncalls := r.uvarint()
		if r.err != nil {
			break
		}
		if ncalls == 0 || ncalls > MaxCallsPerStep {
			return fmt.Errorf("loopguard: step with %d calls", ncalls)
		}
		if (i > 0 && s.seq <= prevSeq) || s.seq >= seq || s.epoch > epoch || s.pepoch > pepoch {
			return errors.New("loopguard: inconsistent step order")
		}
		prevSeq = s.seq
		s.newObs = flags[0]&1 != 0
		s.calls = make([]callRec, 0, ncalls)
		for j := uint64(0); j < ncalls && r.err == nil; j++ {
			var c callRec
			if id := r.bytes(8); id != nil {
				c.id = binary.LittleEndian.Uint64(id)
			}
			copy(c.fp[:], r.bytes(len(c.fp)))
			var cf byte
			if o := r.bytes(1); o != nil {
				cf = o[0]
			}
			if !v2 {
				cf = min(cf, callObserved) // version 1: an observed byte
			}
			c.observed = cf&callObserved != 0
			if cf&callSketched != 0 {
				if k := r.bytes(8); k != nil {
					c.sk.key = binary.LittleEndian.Uint64(k)
				}
				for m := range c.sk.mins {
					if v := r.bytes(4); v != nil {
						c.sk.mins[m] = binary.LittleEndian.Uint32(v)
					}
				}
				if c.sk.key == 0 && r.err == nil {
					return errors.New("loopguard: sketch without a key")
				}
			}
			if !c.observed {
				s.pending++
			}
			s.calls = append(s.calls, c)
		}
		steps = append(steps, s)
	}
	nseen := r.uvarint()
	if r.err == nil && nseen > uint64(len(r.b)/16) {
		return errors.New("loopguard: truncated state")
	}
	keys := r.bytes(int(nseen) * 16)
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return errors.New("loopguard: trailing bytes in state")
	}

	// Commit: keep the newest steps that fit this guard's ring (its own:
	// a guard is restored right after it is made, and a second ring
	// would be a large share of what a restart allocates for the guard).
	clear(g.ring)
	ng := Guard{th: g.th, ring: g.ring, seq: seq, epoch: epoch, mark: mark, pepoch: pepoch, smark: smark}
	if len(steps) > len(ng.ring) {
		steps = steps[len(steps)-len(ng.ring):]
	}
	copy(ng.ring, steps)
	ng.n = len(steps)
	if len(keys) > MaxSeenObservations*16 {
		keys = keys[len(keys)-MaxSeenObservations*16:]
	}
	for i := 0; i < len(keys); i += 16 {
		ng.seen.add(obsKey(keys[i : i+16]))
	}
	*g = ng
	return nil
}
