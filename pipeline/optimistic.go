package pipeline

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// stampOf names a stored snapshot of a run for a guarded write
// (governance.stamp): the SHA-1 that Redis computes of the stored one
// (redis.sha1hex), so that the store compares it without knowing what a
// snapshot holds.
func stampOf(v []byte) string {
	sum := sha1.Sum(v)
	return hex.EncodeToString(sum[:])
}

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
// lock), the settlement was made all the same and the lock is taken: a
// stored run newer than the one held here replaces it and the call's end
// is made again on it, quietly for what it already told; else (this
// replica's own last write had not landed) the write the guard refused is
// made under the lock. What the observer hears and the children a call's
// end cancels are held back until then, so the end made again does not
// tell them twice. The settlement's answer (a failure to defer, the
// headroom for the header) changes nothing of the run, so it is read once
// the round trip is back.
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
	version, stamp := g.version, g.stamp
	var held []func()
	g.held = &held
	t.settleLater, t.headroomRead = true, false
	answer = p.finishLocked(ctx, t, out, cut, resp, booked, rider, now)
	p.closeReservation(t, g)
	ops, applied, err := p.tx.WriteGuarded(ctx, r, stamp, rider)
	g.held = nil
	wrote := g.stamp
	if err != nil {
		p.log.Warn("guarded run write failed; taking the run's lock", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
	}
	if applied {
		tellHeld(held)
		r.Unlock()
		p.settled(ctx, t, rider, booked.actual, now)
		return answer, c, true
	}
	// The run as this replica held it before the call's end: a stored run
	// newer than that replaces it (refresh).
	g.version = version
	r.Unlock()
	tx, err := p.tx.Open(ctx, r, runtx.Need{GoOn: true})
	p.settlingOpen(r, err)
	p.settled(ctx, t, rider, booked.actual, now)
	switch ng := govOf(r); {
	case ng == g:
		// Not replaced: the call's end stands as made, and so does what it
		// told.
		g.version = version + 1
		tellHeld(held)
		return answer, tx.Resend(ops), true
	case ng.stamp == wrote:
		// The stored run is the write itself, applied with its answer lost
		// (a retry then found the guard moved on): the call's end is made.
		tellHeld(held)
		tx.Close()
		return answer, c, true
	}
	t.pendingEnd, t.replacement, t.readAnswer = nil, nil, nil
	answer = p.finishLocked(ctx, t, out, cut, resp, booked, rider, now)
	p.closeReservation(t, govOf(r))
	return answer, tx.Commit(runtx.Wait), true
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
