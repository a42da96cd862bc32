package accounting

import (
	"sync"
	"time"
)

// leaseShards spreads the registry over several locks so that tracking and
// untracking reservations, which every call does, does not serialise the
// gateway on one mutex.
const leaseShards = 16

// Leases is the registry of open reservations, so that an abandoned call
// never leaves a ghost: Sweep releases every reservation whose lease has
// expired. The zero value is ready to use.
type Leases struct {
	shards [leaseShards]leaseShard
}

type leaseShard struct {
	mu sync.Mutex
	m  map[*Reservation]struct{}
	_  [48]byte // keep shards on separate cache lines
}

// Reserve is the package-level Reserve followed by Track.
func (ls *Leases) Reserve(ledgers []*Ledger, want Vector, useFinalReserve bool, lease time.Duration, now time.Time) (*Reservation, *Shortfall) {
	r, sf := Reserve(ledgers, want, useFinalReserve, lease, now)
	if r != nil {
		ls.Track(r)
	}
	return r, sf
}

// Track registers r; it leaves the registry by itself when it is settled,
// released or swept. A reservation belongs to one registry at a time.
func (ls *Leases) Track(r *Reservation) {
	if r == nil {
		return
	}
	r.leases.Store(ls)
	sh := ls.shard(r)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[*Reservation]struct{})
	}
	sh.m[r] = struct{}{}
	sh.mu.Unlock()
	if !r.Open() {
		// Settled before it was tracked: its untrack may have run before the
		// insert above.
		ls.remove(r)
	}
}

func (ls *Leases) shard(r *Reservation) *leaseShard { return &ls.shards[r.id%leaseShards] }

func (ls *Leases) remove(r *Reservation) {
	sh := ls.shard(r)
	sh.mu.Lock()
	delete(sh.m, r)
	sh.mu.Unlock()
}

// untrack removes r from its registry, if any.
func (r *Reservation) untrack() {
	if ls := r.leases.Load(); ls != nil {
		ls.remove(r)
	}
}

// Sweep releases every reservation whose lease expired before now and
// returns how many it released. A swept reservation's later Settle still
// records its spend (see Reservation.Settle); its Release does nothing.
//
// An Extend that races with Sweep on an expired lease may lose: the call is
// then swept although it was renewed a moment too late. Leases should be a
// few times longer than the renewal interval so that this only happens to
// calls that really stalled.
func (ls *Leases) Sweep(now time.Time) int {
	t := now.UnixNano()
	var swept []*Reservation
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for r := range sh.m {
			if r.state.Load() != stateOpen {
				delete(sh.m, r)
				continue
			}
			if t > r.expires.Load() && r.state.CompareAndSwap(stateOpen, stateSwept) {
				delete(sh.m, r)
				swept = append(swept, r)
			}
		}
		sh.mu.Unlock()
	}
	// The CAS above decided ownership; the ledgers are updated outside the
	// shard lock. A late Settle in between counts its spend while the
	// reservation is still counted for an instant: conservative, never over.
	for _, r := range swept {
		r.giveBack()
	}
	return len(swept)
}

// Open returns the number of open reservations in the registry.
func (ls *Leases) Open() int {
	n := 0
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for r := range sh.m {
			if r.state.Load() == stateOpen {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// States exports every open reservation for persistence.
func (ls *Leases) States() []ReservationState {
	var out []ReservationState
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for r := range sh.m {
			if r.state.Load() == stateOpen {
				out = append(out, r.State())
			}
		}
		sh.mu.Unlock()
	}
	return out
}
