package accounting

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// DefaultLease is the lease a reservation gets when Reserve is given none.
// A reservation must always expire: a call that never comes back (a crashed
// handler, a lost stream) would otherwise hold its budget for ever.
const DefaultLease = 5 * time.Minute

// Reservation states. The zero state is not open, so a zero Reservation is
// inert.
const (
	stateOpen        uint32 = iota + 1
	stateSettled            // Settle took it
	stateReleased           // Release took it
	stateSwept              // its lease expired; the reserved amount was returned
	stateSettledLate        // Settle after Sweep: spend recorded, nothing to return
)

// maxInline is how many ledgers a reservation holds without a second
// allocation: run, session, parent, grandparent, team window, tenant window.
const maxInline = 6

// Reservation is budget held for one call on every ledger it draws on,
// until the call is settled from its actual usage or released unused. It is
// safe for concurrent use: exactly one of Settle, Release or an expiry sweep
// takes effect (and a Settle after a sweep still records the spend).
type Reservation struct {
	id      uint64
	want    vec
	ls      []*Ledger // sorted by ledger id, no duplicates; points into inline when it fits
	inline  [maxInline]*Ledger
	expires atomic.Int64 // Unix nanoseconds
	state   atomic.Uint32
	leases  atomic.Pointer[Leases]
}

var reservationIDs atomic.Uint64

// Shortfall says why a reservation was refused: the first ledger (in the
// order the caller gave them) and dimension where the want did not fit.
// Need is what the call wanted in that dimension, Left what the ledger
// could still give (never negative); cost dimensions are in pico-USD.
type Shortfall struct {
	Ledger    string
	Dimension string // "steps", "tokens", "input_tokens", "output_tokens", "tool_calls", "cost"
	Need      int64
	Left      int64
}

func (s *Shortfall) Error() string {
	if s.Dimension == DimCost {
		return "budget " + s.Ledger + ": cost needs " + Money(s.Need).String() + " USD, " + Money(s.Left).String() + " left"
	}
	return "budget " + s.Ledger + ": " + s.Dimension + " needs " + strconv.FormatInt(s.Need, 10) + ", " + strconv.FormatInt(s.Left, 10) + " left"
}

// Reason maps the dimension to its termination reason (docs/design.md §5), so that
// callers never tell budget kinds apart by parsing strings.
func (s *Shortfall) Reason() string {
	switch s.Dimension {
	case DimSteps:
		return "max_steps"
	case DimCost:
		return "cost_budget"
	case DimToolCalls:
		return "tool_quota"
	}
	return "token_budget"
}

// Reserve holds want on every ledger at once, or on none: each ledger must
// have room for want in every dimension (a want of 0 in a dimension always
// fits it). With useFinalReserve false the room excludes the ledger's final
// reserve, which is kept for the wrap-up call; with true the wrap-up may use
// it. On refusal it returns the first shortfall, in the order of ledgers.
//
// Concurrent Reserve calls on shared ledgers never let spent+reserved pass a
// limit: the ledgers involved are locked together, always in the same order
// (by ledger id), so there is no global lock and no deadlock. A lock-free
// scheme (add, check, roll back) was rejected: its transient over-counts
// make concurrent calls fail spuriously, and a spurious refusal here ends a
// run. Nil ledgers are ignored, a ledger given twice counts once.
func Reserve(ledgers []*Ledger, want Vector, useFinalReserve bool, lease time.Duration, now time.Time) (*Reservation, *Shortfall) {
	w := want.vec().nonNeg()
	r := &Reservation{id: reservationIDs.Add(1), want: w}
	if len(ledgers) <= maxInline {
		r.ls = r.inline[:0]
	} else {
		r.ls = make([]*Ledger, 0, len(ledgers))
	}
	r.ls = sortLedgers(r.ls, ledgers)

	for _, l := range r.ls {
		l.mu.Lock()
	}
	for _, l := range r.ls {
		l.roll(now)
	}
	for _, l := range ledgers {
		if l == nil {
			continue
		}
		if d, left, ok := l.fits(&w, useFinalReserve); !ok {
			sf := &Shortfall{Ledger: l.key, Dimension: dimNames[d], Need: w[d], Left: left}
			for _, l := range r.ls {
				l.mu.Unlock()
			}
			return nil, sf
		}
	}
	for _, l := range r.ls {
		for d := range w {
			l.reserved[d] = addSat(l.reserved[d], w[d])
		}
		l.mu.Unlock()
	}
	if lease <= 0 {
		lease = DefaultLease
	}
	r.expires.Store(now.Add(lease).UnixNano())
	r.state.Store(stateOpen)
	return r, nil
}

// fits reports whether w fits the ledger's headroom, and if not the first
// dimension that does not and what is left in it. l.mu must be held.
func (l *Ledger) fits(w *vec, useFinalReserve bool) (dim int, left int64, ok bool) {
	for d := range w {
		if w[d] == 0 || l.limit[d] == 0 {
			continue
		}
		left := l.limit[d]
		if !useFinalReserve {
			left = addSat(left, -l.finalReserve[d])
		}
		left = addSat(addSat(left, -l.spent[d]), -l.reserved[d])
		if w[d] > left {
			return d, max(left, 0), false
		}
	}
	return 0, 0, true
}

// sortLedgers appends the non-nil ledgers of src to dst, sorted by id
// without duplicates. Insertion sort: there are a handful of ledgers, and
// sort.Slice would allocate.
func sortLedgers(dst, src []*Ledger) []*Ledger {
next:
	for _, l := range src {
		if l == nil {
			continue
		}
		i := len(dst)
		for i > 0 && dst[i-1].id >= l.id {
			if dst[i-1] == l {
				continue next
			}
			i--
		}
		dst = append(dst, nil)
		copy(dst[i+1:], dst[i:])
		dst[i] = l
	}
	return dst
}

// Settle replaces the reserved amount by the actual one on every ledger,
// exactly once: after Settle or Release it is a no-op returning false.
//
// Actual usage above the reservation (the estimate was short) is recorded
// truthfully: spent is never clamped, so it may pass a limit. Settle then
// returns true (overran): some ledger is now over its limit in a dimension
// where actual exceeded what was reserved.
//
// If the lease expired and Sweep already returned the reservation, a late
// Settle still adds the actual spend to every ledger (the money was really
// spent) without returning anything a second time.
func (r *Reservation) Settle(actual Vector, now time.Time) (overran bool) {
	if r == nil {
		return false
	}
	late := false
	if !r.state.CompareAndSwap(stateOpen, stateSettled) {
		if !r.state.CompareAndSwap(stateSwept, stateSettledLate) {
			return false
		}
		late = true
	}
	a := actual.vec().nonNeg()
	for _, l := range r.ls {
		l.mu.Lock()
		l.roll(now)
		for d := range a {
			reserved := r.want[d]
			if late {
				reserved = 0
			} else {
				l.reserved[d] = max(l.reserved[d]-reserved, 0)
			}
			l.spent[d] = addSat(l.spent[d], a[d])
			if a[d] > reserved && l.overLimit(d) {
				overran = true
			}
		}
		l.mu.Unlock()
	}
	r.untrack()
	return overran
}

// Release returns the reservation unused (a refused or failed call),
// exactly once; after Settle, Release or an expiry sweep it is a no-op.
func (r *Reservation) Release() {
	if r == nil || !r.state.CompareAndSwap(stateOpen, stateReleased) {
		return
	}
	r.giveBack()
	r.untrack()
}

// giveBack removes the reserved amount from every ledger.
func (r *Reservation) giveBack() {
	for _, l := range r.ls {
		l.mu.Lock()
		for d := range r.want {
			l.reserved[d] = max(l.reserved[d]-r.want[d], 0)
		}
		l.mu.Unlock()
	}
}

// Extend renews the lease to now+lease (DefaultLease when lease ≤ 0): a long
// stream calls it as chunks arrive. It does nothing once the reservation is
// settled, released or swept.
func (r *Reservation) Extend(now time.Time, lease time.Duration) {
	if r == nil || r.state.Load() != stateOpen {
		return
	}
	if lease <= 0 {
		lease = DefaultLease
	}
	r.expires.Store(now.Add(lease).UnixNano())
}

// ID is a process-unique id, stable across persistence.
func (r *Reservation) ID() uint64 { return r.id }

// Want is the amount reserved.
func (r *Reservation) Want() Vector { return r.want.vector() }

// Expires is when the lease runs out.
func (r *Reservation) Expires() time.Time { return time.Unix(0, r.expires.Load()) }

// Open reports whether the reservation still holds its budget.
func (r *Reservation) Open() bool { return r != nil && r.state.Load() == stateOpen }

// Headroom is, per dimension, the most a new reservation may want on all of
// ledgers: the minimum over them of limit − final reserve (unless
// useFinalReserve) − spent − reserved, never below zero; math.MaxInt64 where
// every ledger is unlimited. Window ledgers are read as of their last roll;
// HeadroomAt rolls them first.
func Headroom(ledgers []*Ledger, useFinalReserve bool) Vector {
	return headroom(ledgers, useFinalReserve, time.Time{})
}

// HeadroomAt is Headroom after rolling window ledgers to now.
func HeadroomAt(ledgers []*Ledger, useFinalReserve bool, now time.Time) Vector {
	return headroom(ledgers, useFinalReserve, now)
}

func headroom(ledgers []*Ledger, useFinalReserve bool, now time.Time) Vector {
	h := vec{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64}
	for _, l := range ledgers {
		if l == nil {
			continue
		}
		// One ledger at a time: headroom is advisory (headers, wrap-up
		// sizing); Reserve is what enforces.
		l.mu.Lock()
		l.roll(now)
		lh := l.headroom(useFinalReserve)
		l.mu.Unlock()
		for d := range h {
			h[d] = min(h[d], lh[d])
		}
	}
	return h.vector()
}

// ReservationState is an open reservation for persistence: the keys of its
// ledgers, what it holds and when its lease runs out.
type ReservationState struct {
	ID      uint64    `json:"id"`
	Ledgers []string  `json:"ledgers"`
	Want    Vector    `json:"want"`
	Expires time.Time `json:"expires"`
}

// State exports the reservation for persistence.
func (r *Reservation) State() ReservationState {
	keys := make([]string, len(r.ls))
	for i, l := range r.ls {
		keys[i] = l.key
	}
	return ReservationState{ID: r.id, Ledgers: keys, Want: r.want.vector(), Expires: r.Expires().UTC()}
}

// RestoreReservation gives a persisted open reservation its handle back,
// attached to the restored ledgers that ledger(key) returns. It does not add
// to the ledgers' reserved amounts: LedgerState.Reserved already holds them.
// After a restart the call that held it is gone, so in practice a restored
// reservation is tracked by Leases and swept when its lease runs out.
func RestoreReservation(st ReservationState, ledger func(key string) *Ledger) (*Reservation, error) {
	r := &Reservation{id: st.ID, want: st.Want.vec().nonNeg()}
	if len(st.Ledgers) <= maxInline {
		r.ls = r.inline[:0]
	}
	found := make([]*Ledger, 0, len(st.Ledgers))
	for _, k := range st.Ledgers {
		l := ledger(k)
		if l == nil {
			return nil, fmt.Errorf("restore reservation %d: unknown ledger %q", st.ID, k)
		}
		found = append(found, l)
	}
	r.ls = sortLedgers(r.ls, found)
	r.expires.Store(st.Expires.UnixNano())
	r.state.Store(stateOpen)
	for { // keep new ids above restored ones
		cur := reservationIDs.Load()
		if cur >= st.ID || reservationIDs.CompareAndSwap(cur, st.ID) {
			break
		}
	}
	return r, nil
}
