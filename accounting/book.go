package accounting

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// LedgerSpec names a ledger and says how to create it on first use.
type LedgerSpec struct {
	Key          string
	Limit        Vector
	FinalReserve Vector
	// Period makes a window ledger (a team's daily cap); 0 for a plain one.
	Period time.Duration
}

// Hold is a reservation as the pipeline keeps it: a plain value, so that a
// shared book (Redis) can hand out the same thing as the in-memory one.
type Hold struct {
	ID      string
	Keys    []string
	Want    Vector
	Expires time.Time
	res     *Reservation // MemBook only
}

// LedgerSnapshot is a ledger's state as Book.Snapshot returns it.
type LedgerSnapshot struct {
	Limit, Spent, Reserved Vector
}

// Rider is a settlement a remote book made ready to go out in the round
// trip of another request to the same server (a run's lock), or on its
// own when none carries it. Result gives what it came to — the
// settlement's error, and the headroom it left on the ledgers named, when
// read — sending it first if nothing has; call it once.
type Rider interface {
	Result(ctx context.Context) (head Vector, headRead bool, err error)
}

// Prepared is a reservation a remote book made ready to go out in the
// round trip of another request to the same server (a run's guarded
// write), its hold named before it is made. Result gives what it came to
// — the shortfall or the error, and the headroom it left when read —
// sending it first if nothing has; call it once.
type Prepared interface {
	Hold() *Hold
	Result(ctx context.Context) (short *Shortfall, head Vector, headRead bool, err error)
}

// Book is where ledgers live: in this process (MemBook) or shared by
// several replicas (a Redis book). Every method is safe for concurrent use;
// an error means the book could not be reached, and a caller that draws on
// a budget must then refuse (fail closed).
type Book interface {
	// Ensure creates the ledgers that do not exist yet; existing ones keep
	// their state and limits.
	Ensure(ctx context.Context, specs []LedgerSpec, now time.Time) error
	// Reserve books want on every ledger of keys at once, or on none (see
	// the package-level Reserve for the rules).
	Reserve(ctx context.Context, keys []string, want Vector, useFinalReserve bool, lease time.Duration, now time.Time) (*Hold, *Shortfall, error)
	// Settle replaces the held amount by the actual one, exactly once.
	Settle(ctx context.Context, h *Hold, actual Vector, now time.Time) error
	// Release returns the held amount unused, exactly once.
	Release(ctx context.Context, h *Hold) error
	// Headroom is the most a new reservation may want on all of keys.
	Headroom(ctx context.Context, keys []string, useFinalReserve bool, now time.Time) (Vector, error)
	// Snapshot reads one ledger.
	Snapshot(ctx context.Context, key string, now time.Time) (limit, spent, reserved Vector, err error)
	// SetLimit changes a ledger's limit (resume, a policy change).
	SetLimit(ctx context.Context, key string, limit, finalReserve Vector) error
	// Sweep releases the holds whose lease ran out.
	Sweep(ctx context.Context, now time.Time) (int, error)
	// Forget deletes ledgers for good (runs past the store's retention); a
	// later Ensure would start them afresh.
	Forget(ctx context.Context, keys []string) error
	// Shared reports that the book keeps its own state outside the process
	// (the pipeline then does not persist ledgers itself).
	Shared() bool
}

// MemBook is the in-process book: ledgers in a map, holds in a lease
// registry. With the embedded store the pipeline persists its ledgers.
type MemBook struct {
	mu      sync.RWMutex
	ledgers map[string]*Ledger
	leases  Leases
}

// NewMemBook returns an empty in-process book.
func NewMemBook() *MemBook { return &MemBook{ledgers: map[string]*Ledger{}} }

var _ Book = (*MemBook)(nil)

// Ensure implements Book.
func (b *MemBook) Ensure(_ context.Context, specs []LedgerSpec, now time.Time) error {
	for _, s := range specs {
		b.mu.RLock()
		_, ok := b.ledgers[s.Key]
		b.mu.RUnlock()
		if ok {
			continue
		}
		l := NewWindowLedger(s.Key, s.Limit, s.FinalReserve, s.Period, now)
		b.mu.Lock()
		if _, ok := b.ledgers[s.Key]; !ok {
			b.ledgers[s.Key] = l
		}
		b.mu.Unlock()
	}
	return nil
}

// Ledger returns a ledger by key, or nil.
func (b *MemBook) Ledger(key string) *Ledger {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.ledgers[key]
}

// Put adds a ledger as it is (restored from the store), unless the book
// holds one with its key: that one is live, and may already hold
// reservations (two runs loaded at once can both restore the parent ledger
// they share).
func (b *MemBook) Put(l *Ledger) {
	b.mu.Lock()
	if _, ok := b.ledgers[l.Key()]; !ok {
		b.ledgers[l.Key()] = l
	}
	b.mu.Unlock()
}

// Drop forgets a ledger (a run that left memory; the store keeps it).
func (b *MemBook) Drop(key string) {
	b.mu.Lock()
	delete(b.ledgers, key)
	b.mu.Unlock()
}

// Forget implements Book: the in-process book only drops them (the
// pipeline deletes what the store holds of them).
func (b *MemBook) Forget(_ context.Context, keys []string) error {
	for _, k := range keys {
		b.Drop(k)
	}
	return nil
}

// Adopt tracks a restored reservation under the lease sweeper.
func (b *MemBook) Adopt(r *Reservation) { b.leases.Track(r) }

// HoldState exports a hold for persistence.
func (b *MemBook) HoldState(h *Hold) (ReservationState, bool) {
	if h == nil || h.res == nil {
		return ReservationState{}, false
	}
	return h.res.State(), true
}

func (b *MemBook) lookup(keys []string, into []*Ledger) []*Ledger {
	b.mu.RLock()
	for _, k := range keys {
		if l := b.ledgers[k]; l != nil {
			into = append(into, l)
		}
	}
	b.mu.RUnlock()
	return into
}

// Reserve implements Book.
func (b *MemBook) Reserve(_ context.Context, keys []string, want Vector, useFinalReserve bool, lease time.Duration, now time.Time) (*Hold, *Shortfall, error) {
	var buf [maxInline]*Ledger
	ls := b.lookup(keys, buf[:0])
	r, sf := Reserve(ls, want, useFinalReserve, lease, now)
	if sf != nil {
		return nil, sf, nil
	}
	b.leases.Track(r)
	return &Hold{ID: strconv.FormatUint(r.ID(), 10), Keys: keys, Want: want, Expires: r.Expires(), res: r}, nil, nil
}

// Settle implements Book.
func (b *MemBook) Settle(_ context.Context, h *Hold, actual Vector, now time.Time) error {
	if h != nil && h.res != nil {
		h.res.Settle(actual, now)
	}
	return nil
}

// Release implements Book.
func (b *MemBook) Release(_ context.Context, h *Hold) error {
	if h != nil && h.res != nil {
		h.res.Release()
	}
	return nil
}

// Headroom implements Book.
func (b *MemBook) Headroom(_ context.Context, keys []string, useFinalReserve bool, now time.Time) (Vector, error) {
	var buf [maxInline]*Ledger
	return HeadroomAt(b.lookup(keys, buf[:0]), useFinalReserve, now), nil
}

// Snapshot implements Book.
func (b *MemBook) Snapshot(_ context.Context, key string, now time.Time) (limit, spent, reserved Vector, err error) {
	l := b.Ledger(key)
	if l == nil {
		return
	}
	l.Roll(now)
	limit, spent, reserved = l.Snapshot()
	return
}

// SetLimit implements Book.
func (b *MemBook) SetLimit(_ context.Context, key string, limit, finalReserve Vector) error {
	if l := b.Ledger(key); l != nil {
		l.SetLimit(limit, finalReserve)
	}
	return nil
}

// Sweep implements Book.
func (b *MemBook) Sweep(_ context.Context, now time.Time) (int, error) {
	return b.leases.Sweep(now), nil
}

// Shared implements Book.
func (b *MemBook) Shared() bool { return false }

// Open is the number of holds not yet settled or released.
func (b *MemBook) Open() int { return b.leases.Open() }
