package pipeline

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// EventReleasedAfterRestart is the event a run records when a restart gave
// back the holds of its calls that were in flight when the previous
// process stopped (their budget and their steps).
const EventReleasedAfterRestart = "released_after_restart"

// A hold is a call's reservation as the in-process book keeps it. Its key
// in the store (store.Reservations) says whose it is: the process that
// made it (the pipeline's epoch, one per process), its id in that
// process's book, and its run:
//
//	epoch (16 hex digits) '-' id (16 hex digits) '-' run id
//
// A key written before the run was part of it ends after the id.
const holdKeyFixed = 33 // epoch, dash, id

// reservationKey is the key of a hold this process made for a call of run.
func (p *Pipeline) reservationKey(id uint64, run string) []byte {
	b := make([]byte, 0, holdKeyFixed+1+len(run))
	b = appendHex16(append(appendHex16(b, uint64(p.epoch)), '-'), id) // epoch: UnixNano, positive
	return append(append(b, '-'), run...)
}

func appendHex16(b []byte, x uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[x>>uint(shift)&0xf])
	}
	return b
}

// holdOf reads a hold's key: the epoch of the process that made it and
// its run ("" when the key does not name one). ok is false for a key this
// format does not describe.
func holdOf(key []byte) (epoch uint64, run string, ok bool) {
	if len(key) < holdKeyFixed || key[16] != '-' {
		return 0, "", false
	}
	epoch, err := strconv.ParseUint(string(key[:16]), 16, 64)
	if err != nil {
		return 0, "", false
	}
	if len(key) > holdKeyFixed+1 && key[holdKeyFixed] == '-' {
		run = string(key[holdKeyFixed+1:])
	}
	return epoch, run, true
}

// releasedHolds is what a restart gave back of one run's holds.
type releasedHolds struct {
	holds int
	want  accounting.Vector
}

// releaseDeadHolds gives back, at a restart on the embedded store, every
// hold an earlier process left in the store: a hold belongs to the
// in-process book of the process that made it, and that process is gone
// with the calls that held it. The ledgers come back without them (their
// reserved amounts are not restored), the holds leave the store, and each
// run that had some records it when it is rebuilt or loaded (revive). What
// such a call may have cost at the provider before the process stopped
// was never read; a lease that ran out gave its hold back the same way.
// A hold of this process (a restore after calls were served) is live in
// its book and stays.
func (p *Pipeline) releaseDeadHolds(st store.Store) error {
	var ops []store.Op
	released := map[string]releasedHolds{}
	err := st.Scan(store.Reservations, func(k, v []byte) error {
		epoch, run, ok := holdOf(k)
		if ok && epoch == uint64(p.epoch) {
			return nil
		}
		ops = append(ops, store.Op{Bucket: store.Reservations, Key: bytes.Clone(k)})
		var rs accounting.ReservationState
		if run == "" || json.Unmarshal(v, &rs) != nil {
			return nil
		}
		rel := released[run]
		rel.holds++
		rel.want = rel.want.Add(rs.Want)
		released[run] = rel
		return nil
	})
	if err != nil || len(ops) == 0 {
		return err
	}
	if err := <-st.Apply(ops); err != nil {
		return err
	}
	p.log.Info("holds of calls in flight when the last process stopped released", "holds", len(ops), "runs", len(released))
	if p.shared() {
		return nil // the runs' stored states are every replica's (see revive)
	}
	p.releasedMu.Lock()
	p.released = released
	p.releasedMu.Unlock()
	return nil
}

// releasedOf is what the restart released of run's holds, if anything.
func (p *Pipeline) releasedOf(run string) (releasedHolds, bool) {
	p.releasedMu.Lock()
	defer p.releasedMu.Unlock()
	rel, ok := p.released[run]
	return rel, ok
}

// forgetReleased drops run's entry once its run has recorded it.
func (p *Pipeline) forgetReleased(run string) {
	p.releasedMu.Lock()
	delete(p.released, run)
	p.releasedMu.Unlock()
}

// settleRestored makes a run rebuilt from the embedded store agree with a
// process that has nothing in flight: the holds the restart released are
// recorded (rel, when found), and a run the previous process left
// deciding goes back to ready, as it does when its last call in flight
// fails. It reports whether the run changed. r is not yet in the registry.
func settleRestored(r *runstate.Run, rel releasedHolds, found bool, now time.Time) bool {
	if found {
		r.Record(now, runstate.Event{Type: EventReleasedAfterRestart,
			Detail: strconv.Itoa(rel.holds) + " call(s) in flight when the gateway stopped; released " + renderVector(rel.want)})
	}
	moved := r.Inflight == 0 && r.State == runstate.Deciding &&
		r.Transition(runstate.Ready, now, "call in flight lost when the gateway stopped")
	return found || moved
}

// renderVector renders the dimensions of v that are not zero, as
// steps=2;tokens=8400;cost_usd=0.0126.
func renderVector(v accounting.Vector) string {
	var b strings.Builder
	add := func(k string, x int64) {
		if x == 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(x, 10))
	}
	add("steps", v.Steps)
	add("tokens", v.Tokens)
	add("input_tokens", v.InputTokens)
	add("output_tokens", v.OutputTokens)
	add("tool_calls", v.ToolCalls)
	if v.Cost != 0 {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString("cost_usd=" + v.Cost.String())
	}
	if b.Len() == 0 {
		return "nothing"
	}
	return b.String()
}
