package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	gojson "github.com/goccy/go-json"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/jsonscan"
)

// runBlob is a run as persisted: its state and its governance.
type runBlob struct {
	Run      runstate.Persisted       `json:"run"`
	Limits   policy.Limits            `json:"limits"`
	Term     policy.TerminationAnswer `json:"termination"`
	Loop     policy.LoopThresholds    `json:"loop"`
	Budgeted bool                     `json:"budgeted"`
	Ledgers  []string                 `json:"ledgers"` // the run's own first
	// OwnsAll is governance.ownsAll: store.Owned lists every key of other
	// buckets the run wrote.
	OwnsAll bool          `json:"owns_all,omitempty"`
	Guard   []byte        `json:"guard,omitempty"`
	Tools   *toolSnapshot `json:"tools,omitempty"`
	// Version grows with every write, so a replica can tell a newer state.
	Version int64 `json:"version"`
	// Context is the context manager's state of the run.
	Context *contextmgr.State `json:"context,omitempty"`
}

// Stored records (a run's snapshot, its events, its ledgers and holds) are
// JSON: format 1, whose records start with '{' or '['. A later format
// marks its records with a first byte JSON text cannot start with, so
// that decode can tell the two apart and a store written by this version
// stays readable after the change.
const (
	recordObject = '{'
	recordArray  = '['
)

// encode is the JSON encoder of what a persist writes besides the parts
// appended by hand (the run's state, its ledgers, its events: see
// runstate.Persisted.AppendJSON): a run's fixed policy answers, once, and
// its tool and context state when it has any.
func encode(v any) ([]byte, error) { return json.Marshal(v) }

// decode reads a stored record, format 1, where reading is on a path
// someone waits for — a restart's live runs, a run loaded back on demand,
// the control plane's lists: goccy/go-json decodes a run's snapshot and
// timeline in a third to a quarter of encoding/json's time, into the same
// values (TestDecodeReadsStoredRecords); see docs/performance.md for the
// restart it keeps short. A record of another format is an error rather
// than a guess.
func decode(v []byte, dst any) error {
	if len(v) > 0 && v[0] != recordObject && v[0] != recordArray {
		return fmt.Errorf("pipeline: stored record of an unknown format (first byte %#x)", v[0])
	}
	return gojson.Unmarshal(v, dst)
}

// encodeRun encodes a run's snapshot as runBlob, with the part fixed when
// its governance was built (policy answers, ledgers) encoded once per run
// rather than at every call: it is half the snapshot.
func encodeRun(run *runstate.Persisted, g *governance) ([]byte, error) {
	if g == nil {
		return encode(runBlob{Run: *run})
	}
	if g.static == nil {
		v, err := encode(runStatic{Limits: g.limits, Term: g.term, Loop: g.loop, Budgeted: g.budgeted, Ledgers: g.ledgers, OwnsAll: g.ownsAll})
		if err != nil {
			return nil, err
		}
		g.static = v[1 : len(v)-1] // the members, without the braces
	}
	// One buffer, sized from the last snapshot: it is the value kept by the
	// store's overlay until checkpoint.
	buf := make([]byte, 0, max(g.lastSize+256, len(g.static)+1024))
	buf = append(buf, `{"run":`...)
	buf = run.AppendJSON(buf)
	buf = append(append(buf, ','), g.static...)
	if guard, err := g.guard.MarshalBinary(); err == nil && len(guard) > 0 {
		buf = append(buf, `,"guard":"`...)
		buf = append(base64.StdEncoding.AppendEncode(buf, guard), '"')
	}
	// Tool state and context state: runs that use the tool routes or
	// had their context rewritten.
	if tools := g.tools.snapshot(); tools != nil {
		v, err := encode(tools)
		if err != nil {
			return nil, err
		}
		buf = append(append(buf, `,"tools":`...), v...)
	}
	buf = strconv.AppendInt(append(buf, `,"version":`...), g.version, 10)
	if g.ctx != nil {
		v, err := encode(g.ctx)
		if err != nil {
			return nil, err
		}
		buf = append(append(buf, `,"context":`...), v...)
	}
	buf = append(buf, '}')
	g.lastSize = len(buf)
	return buf, nil
}

// runStatic is the members of runBlob fixed for a run's life.
type runStatic struct {
	Limits   policy.Limits            `json:"limits"`
	Term     policy.TerminationAnswer `json:"termination"`
	Loop     policy.LoopThresholds    `json:"loop"`
	Budgeted bool                     `json:"budgeted"`
	Ledgers  []string                 `json:"ledgers"`
	OwnsAll  bool                     `json:"owns_all,omitempty"`
}

// storedEvents reads a run's timeline from the store, in order. A record
// holds consecutive events (a JSON array: one or more persists'), or one
// event alone, the record older stores hold.
func (p *Pipeline) storedEvents(id string) ([]runstate.Event, error) {
	var events []runstate.Event
	err := p.opts.Store.ScanPrefix(store.Events, append([]byte(id), 0), func(_, v []byte) error {
		if len(v) > 0 && v[0] == '[' {
			var evs []runstate.Event
			if decode(v, &evs) == nil {
				events = append(events, evs...)
			}
			return nil
		}
		var e runstate.Event
		if decode(v, &e) == nil {
			events = append(events, e)
		}
		return nil
	})
	return events, err
}

// eventsInMemory is how many of a run's newest events stay in memory when
// a store holds the whole timeline (Events reads it from there): a long
// run's events were most of its memory (about 700 B each).
const eventsInMemory = 16

// eventsPerRecord is how many events a run's last event record may hold
// and still be rewritten with the next persist's. A record of its own per
// persist was a bbolt key of its own at every checkpoint (a third of the
// checkpoint's cost); rewritten, the checkpoint takes each run's record
// once, and a persist encodes at most this many events again.
const eventsPerRecord = 8

// persistWait bounds how long a call waits for its commit.
const persistWait = 5 * time.Second

// persist queues the run's changes — its snapshot, new events, new lineage
// keys, the ledgers it draws on, reservations opened or closed — as one
// atomic write. The caller holds r's mutex; it may wait on the returned channel
// after unlocking.
func (p *Pipeline) persist(r *runstate.Run) <-chan error { return p.tx.Send(r) }

// saveSoonWait bounds how long a new run whose first call went out stays
// unwritten when that call has not ended (then it goes to the store's next
// commit, store.Store.Later): with the store's own wait, the window in
// which a crash of the process can lose it. Long enough for a loaded
// gateway's calls to a fast provider (a few ms) to end first: one that
// fires encodes the run a second time, at its call's end.
const saveSoonWait = 10 * time.Millisecond

// saveSoon leaves a new run unwritten while its first call is with the
// provider: that call's Finish writes it whole, most often within
// saveSoonWait, and writing it here as well encoded its snapshot twice, the
// first time on the way to the provider (a stream's time to first byte).
// Past saveSoonWait, SaveUnsaved writes it. The caller holds r's mutex.
func (p *Pipeline) saveSoon(r *runstate.Run) {
	g := govOf(r)
	p.reportTransitions(r, g)
	if p.opts.Store == nil || g == nil {
		return
	}
	g.unsaved = true
	p.soonMu.Lock()
	p.soon = append(p.soon, r)
	if len(p.soon) == 1 {
		p.soonTimer.Reset(saveSoonWait)
	}
	p.soonMu.Unlock()
}

// SaveUnsaved writes the new runs saveSoon left that no Finish has written
// yet; its timer calls it, and a gateway that stops calls it before it
// closes the store.
func (p *Pipeline) SaveUnsaved() {
	p.soonMu.Lock()
	runs := p.soon
	p.soon = nil
	p.soonTimer.Stop()
	p.soonMu.Unlock()
	for _, r := range runs {
		r.Lock()
		if g := govOf(r); g != nil && g.unsaved {
			if ops := p.persistOps(r); ops != nil {
				// With the next commit: one a run was a write(2) each.
				p.opts.Store.Later(ops)
			}
		}
		r.Unlock()
	}
}

// persistOps is what persist writes, or nil without a store.
func (p *Pipeline) persistOps(r *runstate.Run) []store.Op {
	p.reportTransitions(r, govOf(r))
	if p.opts.Store == nil {
		return nil
	}
	g := govOf(r)
	now := p.now()
	run := r.Export(now)
	var ops []store.Op
	if g != nil {
		g.unsaved = false
		// Ledgers, queued writes, events, recording, the indexes of runs
		// (two ops at an end), the list of keys, the run: one slice.
		ops = make([]store.Op, 0, len(g.ledgers)+len(g.pending)+6)
		if mb, ok := p.book.(*accounting.MemBook); ok {
			// A shared book keeps its own state; an in-process one is saved here.
			for _, key := range g.ledgers {
				if l := mb.Ledger(key); l != nil {
					st := l.State()
					ops = append(ops, store.Op{Bucket: store.Ledgers, Key: []byte(key), Value: st.AppendJSON(make([]byte, 0, len(key)+320))})
				}
			}
		}
		g.version++
		ops = append(ops, g.pending...)
		g.pending = g.pending[:0]
		// New events go into one record, keyed by its first event's
		// sequence number: the run's last record, rewritten with them while
		// it stays short, or a new one.
		if evs := r.EventsSince(g.savedSeq); len(evs) > 0 {
			if g.recordSeq > 0 {
				if last := r.EventsSince(g.recordSeq - 1); len(last) > 0 && len(last) <= eventsPerRecord && last[0].Seq == g.recordSeq {
					evs = last
				}
			}
			v := runstate.AppendEventsJSON(make([]byte, 0, 256*len(evs)), evs)
			g.recordSeq = evs[0].Seq
			ops = append(ops, store.Op{Bucket: store.Events, Key: store.EventKey(r.ID, g.recordSeq), Value: v})
		}
		g.savedSeq = run.LastEventSeq
		if !g.holding() { // a guarded write may be taken back (unwrite)
			r.TrimEvents(g.savedSeq, eventsInMemory)
		}
		ops = p.recordingOps(r, g, now, ops)
	}
	v, err := encodeRun(&run, g)
	if err != nil {
		p.log.Error("cannot encode run", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
		return nil
	}
	if g != nil && p.tx.Optimistic() {
		g.stamp = store.Stamp(v)
	}
	var key []byte
	if g != nil {
		key = g.idBytes(r.ID)
	} else {
		key = []byte(r.ID)
	}
	ops = indexOps(ops, g, key, run.State.Final(), run.Ended, now)
	if g != nil {
		ops = p.ownedOp(ops, g, run.State.Final(), 0)
	}
	return append(ops, store.Op{Bucket: store.Runs, Key: key, Value: v})
}

// runIndex is which of the store's two indexes of runs holds a run: the
// list of unfinished runs (store.Unfinished), which a restart reads, or
// the runs by their end (store.Ended), which the retention sweep reads.
type runIndex uint8

const (
	indexedNowhere    runIndex = iota // nothing of the run written yet
	indexedUnfinished                 // on the list of unfinished runs
	indexedEnded                      // listed by its end
)

// indexOf is the index a run's stored state belongs in.
func indexOf(final bool) runIndex {
	if final {
		return indexedEnded
	}
	return indexedUnfinished
}

// indexOps keeps the run in the store's indexes, in the same commit as its
// snapshot: a run goes on the list of unfinished runs with its first
// snapshot that is not final (a new run, a resumed one); its first final
// one takes it off the list and lists it by its end, with the keys it
// noted that store.Owned does not hold (see own). A run's other writes add
// nothing.
func indexOps(ops []store.Op, g *governance, key []byte, final bool, end, now time.Time) []store.Op {
	was, want := indexedUnfinished, indexOf(final) // without governance: every op
	if g != nil {
		if g.indexed == want {
			return ops
		}
		was, g.indexed = g.indexed, want
	}
	if !final {
		return append(ops, store.Op{Bucket: store.Unfinished, Key: key, Value: listedValue})
	}
	if was == indexedUnfinished {
		ops = append(ops, store.Op{Bucket: store.Unfinished, Key: key})
	}
	value := listedValue
	if g != nil && len(g.owned) > 0 {
		value, g.owned = g.owned, nil // handed over to the store
	}
	if end.IsZero() {
		end = now
	}
	return append(ops, store.Op{Bucket: store.Ended, Key: endedKey(end, key), Value: value})
}

// listedValue is the value of an index entry whose key says it all: a
// run's in store.Unfinished, one in store.Ended without keys to list, the
// marks that complete them.
var listedValue = []byte("1")

// persistPendingLater hands the queued ops to the store's next commit
// (store.Store.Later): for writes nobody waits for.
func (p *Pipeline) persistPendingLater(r *runstate.Run) {
	g := govOf(r)
	p.reportTransitions(r, g)
	if p.opts.Store == nil || g == nil || len(g.pending) == 0 {
		return
	}
	p.opts.Store.Later(append([]store.Op(nil), g.pending...))
	g.pending = g.pending[:0]
}

// queue adds a write to the run's next persist.
func (g *governance) queue(op store.Op) { g.pending = append(g.pending, op) }

// trackReservation records an in-process hold in the store, so that a
// restart knows what the calls in flight held and gives it back
// (releaseDeadHolds).
func (p *Pipeline) trackReservation(t *Turn, g *governance, h *accounting.Hold) {
	mb, ok := p.book.(*accounting.MemBook)
	if p.opts.Store == nil || !ok {
		return
	}
	if st, ok := mb.HoldState(h); ok {
		t.resKey = p.reservationKey(st.ID, t.run.ID)
		// The record's fixed part runs to about 300 bytes with a priced
		// call's want (five members) and a nanosecond expiry: 128 grew it
		// once a call.
		size := 320
		for _, k := range st.Ledgers {
			size += len(k) + 3
		}
		g.queue(store.Op{Bucket: store.Reservations, Key: t.resKey, Value: st.AppendJSON(make([]byte, 0, size))})
	}
}

// closeReservation forgets a settled or released reservation in the store.
// A hold's key is written once, by trackReservation: while that write has
// not left for the log (still queued with the run, or waiting in the
// store's Later queue, as it does for a call that ends within a
// millisecond or two), dropping it is all there is to do, and spares the
// log, the overlay and the checkpoint a put and a delete of a key no
// restart would ever see.
func (p *Pipeline) closeReservation(t *Turn, g *governance) {
	if t.resKey == nil {
		return
	}
	n := len(g.pending)
	g.pending = slices.DeleteFunc(g.pending, func(op store.Op) bool { return op.Writes(store.Reservations, t.resKey) })
	if len(g.pending) < n {
		return
	}
	if p.opts.Store.CancelLater(store.Reservations, t.resKey) {
		return
	}
	g.queue(store.Op{Bucket: store.Reservations, Key: t.resKey})
}

// wait blocks until a persist committed (bounded); a failure is logged,
// readiness reports it.
func (p *Pipeline) wait(ch <-chan error, runID string) (committed bool) { return p.tx.Wait(ch, runID) }

// Restore is StartRestore, waited for: every unfinished run is back in
// memory when it returns.
func (p *Pipeline) Restore(ctx context.Context) (runs int, err error) {
	rs, err := p.StartRestore(ctx)
	if err != nil {
		return 0, err
	}
	return rs.Wait()
}

// StartRestore brings back from the store what a restart must not lose:
// the ledgers the team windows hold, open approvals; it gives back the
// holds of the calls that were in flight when the previous process
// stopped (releaseDeadHolds); then it leaves the unfinished runs to be
// rebuilt in the background (restoreRuns) and returns: a gateway serves
// as soon as budgets are whole, whatever the number of runs in flight
// (the time to rebuild them grows with their number). Until a run is rebuilt, a call, a lineage key or the
// control plane that asks for it loads it from the store (getRun) as it
// does a run that left memory; the rebuilding leaves such a run as it
// is, and no ended run leaves memory until the rebuilding is over, so
// none can be rebuilt from an older snapshot. Cancelling ctx stops the
// rebuilding.
func (p *Pipeline) StartRestore(ctx context.Context) (*Restoring, error) {
	rebuild := &Restoring{done: make(chan struct{})}
	st := p.opts.Store
	if st == nil {
		close(rebuild.done)
		return rebuild, nil
	}
	now := p.now()
	// A shared book restores itself, holds and all; only runs and lineage
	// come from the store.
	if mb, ok := p.book.(*accounting.MemBook); ok {
		if err := p.releaseDeadHolds(st); err != nil {
			return nil, err
		}
		// Team windows (Ensure would start a missing one afresh); a run's
		// ledgers come with its run (restoreLedgers), and most runs in the
		// store have ended. Nothing is reserved on them: the holds of the
		// last process were given back.
		err := st.ScanPrefix(store.Ledgers, []byte(teamLedgerPrefix), func(k, v []byte) error {
			var ls accounting.LedgerState
			if err := decode(v, &ls); err != nil {
				return fmt.Errorf("ledger %q: %w", k, err)
			}
			ls.Reserved = accounting.Vector{}
			mb.Put(accounting.RestoreLedger(ls))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// Lineage keys are not read: a request echoing one resolves it through
	// the store (lookup), which indexes it again; reading them all made a
	// restart's time grow with every call ever made (two keys a call).
	if err := p.restoreTools(st); err != nil {
		return nil, err
	}
	p.restoring.Store(true)
	go func() {
		defer close(rebuild.done)
		rebuild.runs, rebuild.err = p.restoreRuns(ctx, st, now)
		p.restoring.Store(false)
	}()
	return rebuild, nil
}

// runLedgerPrefix starts the key of a run's own ledger (then the run id),
// teamLedgerPrefix a team window's (then team and window name).
const (
	runLedgerPrefix  = "run:"
	teamLedgerPrefix = "team:"
)

// storedFinal reports whether a stored run snapshot (runBlob) is of a run
// that ended, reading only the run's state, as a decode would (the last
// "state" of the last "run" wins). A snapshot it cannot read so, or with
// keys a decode could also take for these (escaped, or of another case),
// is not final: the full decode then decides.
func storedFinal(v []byte) bool {
	s := unsafe.String(unsafe.SliceData(v), len(v)) // read here, never kept
	final, unsure := false, false
	alias := func(key, name string) bool {
		return key != name && (strings.EqualFold(key, name) || strings.IndexByte(key, '\\') >= 0)
	}
	end := jsonscan.Object(s, jsonscan.SkipWS(s, 0), false, func(key string, _, i int) int {
		if key != "run" {
			unsure = unsure || alias(key, "run")
			return jsonscan.SkipValue(s, i)
		}
		final = false
		return jsonscan.Object(s, i, false, func(key string, _, j int) int {
			end := jsonscan.SkipValue(s, j)
			if key == "state" {
				final = end > j+1 && s[j] == '"' && runstate.State(s[j+1:end-1]).Final()
			} else {
				unsure = unsure || alias(key, "state")
			}
			return end
		})
	})
	return end >= 0 && final && !unsure
}

// lineageInMemory is how many of a run's newest lineage keys stay indexed
// in memory when a store holds them all: a request echoes its last
// assistant turn, whose keys are the newest; an older one resolves through
// the store (lookup). A long run's keys were a third of its memory.
const lineageInMemory = 16

// indexKey records a lineage key in memory and, with a store, in it. The
// caller holds the run's lock.
func (p *Pipeline) indexKey(g *governance, key, runID string) {
	p.runs.Index(key, runID)
	if g != nil && p.opts.Store != nil {
		g.queue(store.Op{Bucket: store.Lineage, Key: []byte(key), Value: g.idBytes(runID)})
		g.own(ownedLineage, key)
		p.keepKey(g, key, runID)
	}
}

// keepKey adds a key to those the run holds in memory (dropped with it),
// letting the oldest leave memory past twice lineageInMemory.
func (p *Pipeline) keepKey(g *governance, key, runID string) {
	g.keys = append(g.keys, key)
	if n := len(g.keys); n > 2*lineageInMemory {
		old := n - lineageInMemory
		p.runs.Unindex(runID, g.keys[:old])
		kept := copy(g.keys, g.keys[old:])
		clear(g.keys[kept:n])
		g.keys = g.keys[:kept]
	}
}
