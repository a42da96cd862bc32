package accounting

import (
	"sync"
	"sync/atomic"
	"time"
)

// Ledger is one budget: a run, a session, a parent run, or a team window
// (a daily cap). It records what is spent and what is reserved by calls in
// flight, against a limit of which the final reserve is kept for wrap-up.
//
// A limit dimension of 0 is unlimited; a negative one allows nothing (so a
// misconfigured limit fails closed rather than open). Each ledger has its
// own mutex; Reserve locks the ledgers it involves in a fixed order, so there
// is no global lock and no deadlock.
type Ledger struct {
	mu sync.Mutex

	// id orders ledgers for locking. It is unique per Ledger value, so two
	// ledgers that happen to share a key (say, a run ledger restored twice)
	// still have a total order.
	id  uint64
	key string

	limit        vec
	finalReserve vec
	spent        vec
	reserved     vec

	// Window ledgers: spent resets at each period boundary.
	period      int64 // nanoseconds; 0 for a plain ledger
	windowStart int64 // Unix nanoseconds of the current window's start
}

var ledgerIDs atomic.Uint64

// NewLedger returns a ledger with the given limit and final reserve (the
// part of the limit kept for the wrap-up call).
func NewLedger(key string, limit, finalReserve Vector) *Ledger {
	return &Ledger{
		id:           ledgerIDs.Add(1),
		key:          key,
		limit:        limit.vec(),
		finalReserve: finalReserve.vec().nonNeg(),
	}
}

// NewWindowLedger returns a ledger whose spent amount resets at each period
// boundary, such as a team's daily cost cap. Boundaries are multiples of
// period since the Unix epoch, so a 24h window starts at UTC midnight (and a
// 1h window on the hour). Reserved amounts carry over a boundary: those
// calls are still in flight, and they settle into the window they finish in,
// which is when the money is spent.
func NewWindowLedger(key string, limit, finalReserve Vector, period time.Duration, now time.Time) *Ledger {
	l := NewLedger(key, limit, finalReserve)
	if period > 0 {
		l.period = int64(period)
		l.windowStart = windowStart(now.UnixNano(), l.period)
	}
	return l
}

func windowStart(t, period int64) int64 {
	s := t - t%period
	if t < 0 && t%period != 0 {
		s -= period
	}
	return s
}

// Key returns the ledger's key (run id, session id, team window name…).
func (l *Ledger) Key() string { return l.key }

// Period returns a window ledger's period, 0 for a plain ledger.
func (l *Ledger) Period() time.Duration { return time.Duration(l.period) }

// Snapshot returns the limit, the amount spent and the amount reserved.
// A window ledger reports its current window as of the last call that
// carried a time (Reserve, Settle, HeadroomAt, Roll).
func (l *Ledger) Snapshot() (limit, spent, reserved Vector) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit.vector(), l.spent.vector(), l.reserved.vector()
}

// SetLimit changes the limit and final reserve: a run resumed with more
// budget, or a policy change. Spent and reserved are kept; calls already
// reserved stay reserved even if the new limit is below them.
func (l *Ledger) SetLimit(limit, finalReserve Vector) {
	l.mu.Lock()
	l.limit = limit.vec()
	l.finalReserve = finalReserve.vec().nonNeg()
	l.mu.Unlock()
}

// Roll advances a window ledger to the window that holds now, resetting its
// spent amount when a boundary has passed. Reserve and Settle do this
// themselves; Roll is for readers that want a current Snapshot.
func (l *Ledger) Roll(now time.Time) {
	if l.period == 0 {
		return
	}
	l.mu.Lock()
	l.roll(now)
	l.mu.Unlock()
}

// roll must be called with l.mu held.
func (l *Ledger) roll(now time.Time) {
	if l.period == 0 || now.IsZero() {
		return
	}
	t := now.UnixNano()
	if t-l.windowStart < l.period {
		return // same window (or a clock that stepped back: keep the window)
	}
	l.windowStart = windowStart(t, l.period)
	l.spent = vec{}
}

// headroom returns, per dimension, what may still be reserved (see
// headroomOf). l.mu must be held.
func (l *Ledger) headroom(useFinalReserve bool) vec {
	return headroomOf(l.limit, l.finalReserve, l.spent, l.reserved, useFinalReserve)
}

// LedgerHeadroom is what a ledger in this state leaves for a new
// reservation, as Headroom counts it for one ledger: a book that keeps its
// ledgers elsewhere (Redis) and reads their state counts with it, and
// Vector.Min takes the least over several.
func LedgerHeadroom(limit, finalReserve, spent, reserved Vector, useFinalReserve bool) Vector {
	return headroomOf(limit.vec(), finalReserve.vec(), spent.vec(), reserved.vec(), useFinalReserve).vector()
}

// headroomOf returns, per dimension, what may still be reserved: limit,
// less the final reserve unless useFinalReserve, less spent and reserved;
// unlimited where the limit is 0; never below zero.
func headroomOf(limit, finalReserve, spent, reserved vec, useFinalReserve bool) vec {
	var h vec
	for d := range h {
		lim := limit[d]
		if lim == 0 {
			h[d] = unlimited
			continue
		}
		left := lim
		if !useFinalReserve {
			left = addSat(left, -finalReserve[d])
		}
		left = addSat(left, -spent[d])
		left = addSat(left, -reserved[d])
		h[d] = max(left, 0)
	}
	return h
}

// overLimit reports whether spent+reserved exceeds the limit in dimension d.
// l.mu must be held.
func (l *Ledger) overLimit(d int) bool {
	lim := l.limit[d]
	return lim != 0 && addSat(l.spent[d], l.reserved[d]) > lim
}

// LedgerState is a ledger's state for persistence. Reserved includes every
// open reservation; persist the reservations (ReservationState) in the same
// snapshot so that restoring both gives them back their handles.
type LedgerState struct {
	Key          string    `json:"key"`
	Limit        Vector    `json:"limit"`
	FinalReserve Vector    `json:"final_reserve"`
	Spent        Vector    `json:"spent"`
	Reserved     Vector    `json:"reserved"`
	PeriodNs     int64     `json:"period_ns,omitempty"`
	WindowStart  time.Time `json:"window_start"` // written even when zero: persisted at every call, and omitzero costs the encoder a reflect check
}

// State exports the ledger for persistence.
func (l *Ledger) State() LedgerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := LedgerState{
		Key:          l.key,
		Limit:        l.limit.vector(),
		FinalReserve: l.finalReserve.vector(),
		Spent:        l.spent.vector(),
		Reserved:     l.reserved.vector(),
		PeriodNs:     l.period,
	}
	if l.period > 0 {
		st.WindowStart = time.Unix(0, l.windowStart).UTC()
	}
	return st
}

// RestoreLedger rebuilds a ledger from its persisted state. A window ledger
// rolls to the current window on its next Reserve or Settle.
func RestoreLedger(st LedgerState) *Ledger {
	l := NewLedger(st.Key, st.Limit, st.FinalReserve)
	l.spent = st.Spent.vec().nonNeg()
	l.reserved = st.Reserved.vec().nonNeg()
	if st.PeriodNs > 0 {
		l.period = st.PeriodNs
		l.windowStart = windowStart(st.WindowStart.UnixNano(), l.period)
	}
	return l
}
