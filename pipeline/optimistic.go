package pipeline

import (
	"context"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire"
)

// holding reports that what a call tells the observer is held back
// (governance.held).
func (g *governance) holding() bool { return g != nil && g.held != nil }

// hold keeps f until the call's guarded write is known to stand.
func (g *governance) hold(f func()) { *g.held = append(*g.held, f) }

// finishGuarded finishes a call without the run's lock when this replica
// moved the run last (docs/design.md §9, "Several replicas"): the run's
// changes are made on the run as held here and written, with the
// settlement, in one round trip guarded by the stored run's stamp
// (runtx.Manager.WriteGuarded). ok is false when the call cannot go so
// (no settlement to carry, no stamp, writes queued, a recording), and
// Finish takes the lock as before.
//
// When the guard fails (another replica moved the run, or holds its
// lock), the settlement was made all the same; the write is taken back
// into the run (unwrite), and the lock is taken. A stored run newer than
// the one held here replaces it (refresh), and the call's end is made
// again on it; else the end stands as made and is committed under the
// lock. What the observer hears and the children an end cancels are held
// back until then, so that an end made again does not tell them twice.
// The settlement's answer (a failure to keep for later, the headroom for
// the budget header) changes nothing of the run: it is read once the
// round trip is back. A write whose answer was lost (an error) may have
// been applied: a stored run that is that write is the call's end, not
// made again. Only when the write's answer is lost twice (the client's
// retry included) and another call of the run on this replica commits
// in between is the stored run no longer that write, and the end is made
// again: counted twice.
func (p *Pipeline) finishGuarded(ctx context.Context, t *Turn, out Outcome, cut bool, resp *wire.Response, booked settlement,
	rider accounting.Rider, now time.Time) (answer *Answer, c runtx.Pending, ok bool) {
	r := t.run
	if rider == nil || !p.tx.Optimistic() {
		return nil, c, false
	}
	r.Lock()
	g := govOf(r)
	if g == nil || g.stamp == "" || len(g.pending) > 0 || g.rec != nil {
		r.Unlock()
		return nil, c, false
	}
	var held []func()
	g.held = &held
	t.settleLater, t.headroomRead = true, false
	answer = p.finishLocked(ctx, t, out, cut, resp, booked, rider, now)
	p.closeReservation(t, g)
	before := g.beforeWrite()
	ops, applied, err := p.tx.WriteGuarded(ctx, r, before.stamp, rider)
	g.held = nil
	if applied {
		tellHeld(held)
		r.TrimEvents(g.savedSeq, eventsInMemory)
		// Read with the settlement, in the same round trip: no round trip
		// under the run's mutex.
		p.settled(ctx, t, rider, booked.actual, now)
		g.seen, g.seenStamp = nil, ""
		if lr, ok := rider.(ledgerReader); ok {
			if st, read := lr.Ledger(g.ledger); read && st != nil {
				g.seen, g.seenStamp = st, g.stamp
			}
		}
		r.Unlock()
		return answer, c, true
	}
	if err != nil {
		p.log.Warn("guarded run write failed; taking the run's lock", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
	}
	wrote := g.stamp
	g.unwrite(before, ops)
	r.Unlock()
	tx, oerr := p.tx.Open(ctx, r, runtx.Need{GoOn: true})
	p.settlingOpen(r, oerr)
	p.settled(ctx, t, rider, booked.actual, now)
	switch ng := govOf(r); {
	case ng == g:
		// Not replaced: the call's end stands as made, and so does what it
		// told.
		tellHeld(held)
		return answer, tx.Commit(runtx.Wait), true
	case err != nil && ng != nil && ng.stamp == wrote:
		// The stored run is the write itself, applied with its answer lost.
		tellHeld(held)
		tx.Close()
		return answer, c, true
	}
	t.pendingEnd, t.replacement, t.readAnswer = nil, nil, nil
	// The first pass's: kept in memory only, no load puts it back.
	r.Inflight++
	answer = p.finishLocked(ctx, t, out, cut, resp, booked, rider, now)
	p.closeReservation(t, govOf(r))
	return answer, tx.Commit(runtx.Wait), true
}

// written is what a write of the run moves on its governance
// (persistOps), kept so that a write the guard refused is taken back
// (unwrite): the run's next commit, whoever makes it, then writes what
// this one held.
type written struct {
	version, savedSeq, recordSeq int64
	indexed                      runIndex
	owned                        []byte
	stamp                        string
	pending                      int // queued writes: the first ops of the write
}

func (g *governance) beforeWrite() written {
	return written{version: g.version, savedSeq: g.savedSeq, recordSeq: g.recordSeq, indexed: g.indexed,
		owned: g.owned, stamp: g.stamp, pending: len(g.pending)}
}

// unwrite takes back a write of ops that was not applied: the run is as
// if it had not been written. persistOps puts the queued writes first.
func (g *governance) unwrite(w written, ops []store.Op) {
	g.version, g.savedSeq, g.recordSeq, g.indexed, g.owned, g.stamp = w.version, w.savedSeq, w.recordSeq, w.indexed, w.owned, w.stamp
	g.pending = append(g.pending[:0], ops[:w.pending]...)
}

// tellHeld tells what a guarded call's end held back (governance.held).
func tellHeld(held []func()) {
	for _, f := range held {
		f()
	}
}

// settled reads what a settlement that rode with a guarded write came to
// (Turn.settleLater): the headroom for the budget header, or a failure to
// keep for later.
func (p *Pipeline) settled(ctx context.Context, t *Turn, rider accounting.Rider, actual accounting.Vector, now time.Time) {
	var err error
	if t.headroom, t.headroomRead, err = rider.Result(ctx); err != nil {
		p.settleFailed(t, actual, now, err)
	}
}

// reservationSeen tells the observer how a call's reservation went, or
// holds it (governance.held).
func (p *Pipeline) reservationSeen(g *governance, outcome string) {
	if g.holding() {
		g.hold(func() { p.obs.Reservation(outcome) })
		return
	}
	p.obs.Reservation(outcome)
}

// preparingReserver is a book whose reservation can ride with a run's
// guarded write (redisbook.Book).
type preparingReserver interface {
	PrepareReserve(specs []accounting.LedgerSpec, ensureAt time.Time, keys []string, want accounting.Vector, useFinalReserve bool,
		lease time.Duration, now time.Time, readHead, headFinalReserve bool) accounting.Prepared
}

// ledgerReader is a settlement that read the ledgers it left
// (redisbook's): the run's own, for the next call's start (governance.seen).
type ledgerReader interface {
	Ledger(key string) (state *accounting.LedgerSnapshot, read bool)
}

// beginGuarded begins a call without the run's lock when this replica
// moved the run last and its last call's end read the run's own ledger,
// or when the run is new to this replica (fresh: made in memory for the
// call, and taken as new) (docs/design.md §9, "Several replicas"):
// admission reads the run as held here and that ledger (a new run's
// empty), and the reservation (with a new run's ledgers made ahead of
// it) and the run's write go in one round trip
// (runtx.Manager.WriteReserving). The write is applied only if the
// reservation was made, the stored run is the one held here (none, for a
// new run) and the run's ledger is as counted. A call that cannot go so
// (the run has calls in flight, children or a parent, a recording or a
// summariser model; this replica did not write it last) is left to the
// lock (began false, again nil, t untouched).
//
// A call whose admission does more than reserve (an end, a wrap-up) or
// whose write was refused (a shortfall, another replica moved the run or
// had stored it) is begun anew under the lock, with again: the run is
// read again from the store (a fresh run leaves memory, for the lock to
// find it), what this pass told the observer is dropped, and the hold it
// may have made is released in the lock's round trip (free).
func (p *Pipeline) beginGuarded(ctx context.Context, t *Turn, r *runstate.Run, fresh bool) (began bool, again *Turn, free accounting.Rider) {
	pr := p.book.(preparingReserver) // beginAhead asked
	r.Lock()
	g := govOf(r)
	var stamp string
	var seen *accounting.LedgerSnapshot
	switch {
	case fresh && g != nil:
		// Governed meanwhile by another call of this replica's: the
		// lock, which reads what that call wrote.
		r.Unlock()
		return false, nil, nil
	case fresh:
		seen = &accounting.LedgerSnapshot{}
	case g == nil || g.stamp == "" || g.seen == nil || g.seenStamp != g.stamp || g.ledger != runLedgerPrefix+r.ID ||
		r.Inflight != 0 || len(r.Children) > 0 || r.ParentID != "" ||
		g.rec != nil || len(g.pending) > 0 || g.limits.SummariserModel != "":
		r.Unlock()
		return false, nil, nil
	default:
		stamp, seen = g.stamp, g.seen
	}
	var initial runstate.Persisted
	if fresh {
		initial = r.Export(p.now()) // what a refused new run is put back to
	}
	var held []func()
	t.tells = &held
	if g != nil {
		g.held = t.tells
	}
	t.run = r
	// A new run's ledger is made by its reservation (Turn.ahead).
	t.ledgerAtLock, t.ledgerReadAtLock = seen, true
	if fresh {
		t.ledgerAtLock = nil
	}
	t.reserveLater = pr
	p.beginLocked(ctx, t, r, fresh)
	t.reserveLater = nil
	g = govOf(r)
	applied := false
	var ops []store.Op
	var before written
	if g != nil && t.prepared != nil && t.res == t.prepared.Hold() && t.Answer == nil && !t.wrapUp &&
		g.ledger == runLedgerPrefix+r.ID && g.rec == nil && g.limits.SummariserModel == "" {
		before = g.beforeWrite()
		var err error
		ops, applied, err = p.tx.WriteReserving(ctx, r, stamp, t.prepared, g.ledger, seen.Spent.Steps, seen.Reserved.Steps)
		if err != nil {
			p.log.Warn("guarded run write failed; taking the run's lock", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
		}
	}
	t.tells = nil
	if g != nil {
		g.held = nil
	}
	if applied {
		// Made: the hold the write depended on exists, so no shortfall.
		_, head, read, _ := t.prepared.Result(ctx)
		t.headroom, t.headroomRead = head, read && t.Req.Stream
		tellHeld(held)
		r.TrimEvents(g.savedSeq, eventsInMemory)
		r.Unlock()
		return true, nil, nil
	}
	if t.unreg != nil {
		r.Inflight-- // the forward's: kept in memory only, no load puts it back
	}
	var keys []string
	switch {
	case fresh:
		// Back to new, and out of memory: the lock finds the run (as
		// stored, or anew); a call that holds it meanwhile finds it new.
		if g != nil {
			keys = g.keys
		}
		r.Load(initial, nil, p.now())
		r.Ext = nil
	case ops != nil:
		g.unwrite(before, ops)
		fallthrough
	default:
		// Read again from the store by the lock that follows, whatever it
		// holds: this pass's changes are not the run's.
		g.version, g.seen = -1, nil
	}
	r.Unlock()
	if fresh {
		p.runs.Remove(r.ID, keys)
	}
	if t.cancel != nil {
		t.cancel()
	}
	if t.unreg != nil {
		t.unreg()
	}
	if rr, ok := p.book.(releasingRider); ok && t.res != nil {
		free = rr.ReleaseRider(t.res)
	} else if t.res != nil {
		p.release(t, g)
	}
	again = &Turn{Call: t.Call, codec: t.codec, started: t.started}
	again.Req, _ = t.codec.ParseRequest(t.Call.Body) // parsed once already
	return false, again, free
}

// beginAhead begins the call without the run's lock when it can
// (beginGuarded): on a run this replica holds, or on a new one (created,
// or named and not held here, taken as new: a run stored by another
// replica refuses the write, and the lock then reads it).
func (p *Pipeline) beginAhead(ctx context.Context, t *Turn, r *runstate.Run, created bool, named string) (began bool, again *Turn, free accounting.Rider) {
	if _, ok := p.book.(preparingReserver); !ok || !p.tx.Optimistic() || t.Call.run != nil || t.replayed() != nil ||
		((created || named != "") && t.Call.ParentRunID != "") {
		return false, nil, nil
	}
	switch {
	case named != "":
		var made bool
		if r, made = p.runs.GetOrCreate(p.identity(t.Call, named, t.Call.SessionID)); !made {
			return false, nil, nil // brought in meanwhile: the lock reads it
		}
		return p.beginGuarded(ctx, t, r, true)
	case created:
		return p.beginGuarded(ctx, t, r, true)
	}
	return p.beginGuarded(ctx, t, r, false)
}

// freed lands a release that rode in a run lock's round trip
// (beginGuarded's free), sending it by itself when nothing carried it.
func (p *Pipeline) freed(ctx context.Context, runID string, free accounting.Rider) {
	if free == nil {
		return
	}
	if _, _, err := free.Result(ctx); err != nil {
		// The lease frees it at the latest.
		p.log.Warn("release failed; the lease will free the budget", "run_id", runstate.NameOf(runID), "tenant", runstate.TenantOf(runID), "err", err)
	}
}

// releasingRider is a book whose release can ride in a run lock's round
// trip (redisbook.Book).
type releasingRider interface {
	ReleaseRider(h *accounting.Hold) accounting.Rider
}
