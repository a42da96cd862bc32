package runstate

import "time"

// Persisted is everything of a run that must outlive the process, except
// its events (stored one by one) and the pipeline's governance (Ext).
type Persisted struct {
	Identity
	State          State                      `json:"state"`
	Counters       Counters                   `json:"counters"`
	EstimatedCost  int64                      `json:"estimated_cost_pusd"`
	ActualCost     int64                      `json:"actual_cost_pusd"`
	MaxSteps       int64                      `json:"max_steps"`
	DeadlineMs     int64                      `json:"deadline_ms"`
	Created        time.Time                  `json:"created"`
	ElapsedMs      int64                      `json:"elapsed_ms"`
	Ended          time.Time                  `json:"ended"` // written even when zero: omitzero costs the encoder a reflect check per snapshot
	LastAction     *Action                    `json:"last_action,omitempty"`
	Partial        string                     `json:"partial,omitempty"`
	Termination    *Termination               `json:"termination,omitempty"`
	ResumeToken    string                     `json:"resume_token,omitempty"`
	WouldTerminate []ShadowHit                `json:"would_terminate,omitempty"`
	Children       []string                   `json:"child_run_ids,omitempty"`
	Outstanding    map[string]OutstandingCall `json:"outstanding,omitempty"`
	LastEventSeq   int64                      `json:"last_event_seq"`
}

// Export returns the run's persistent part. The caller holds Mu.
func (r *Run) Export(now time.Time) Persisted {
	p := Persisted{
		Identity: r.Identity, State: r.State, Counters: r.Counters,
		EstimatedCost: r.Counters.EstimatedCost, ActualCost: r.Counters.ActualCost,
		MaxSteps: r.MaxSteps, DeadlineMs: r.DeadlineMs, Created: r.Created,
		ElapsedMs: r.Elapsed(now).Milliseconds(), Ended: r.Ended, LastAction: r.LastAction,
		Partial: r.Partial, Termination: r.Termination, WouldTerminate: r.WouldTerminate,
		Children: r.Children, Outstanding: r.Outstanding,
	}
	if r.Termination != nil {
		p.ResumeToken = r.Termination.ResumeToken
	}
	p.LastEventSeq = r.seqBase
	if n := len(r.Events); n > 0 {
		p.LastEventSeq = r.Events[n-1].Seq
	}
	return p
}

// Restore rebuilds a run from its persistent part and its events; its
// elapsed time goes on from where it stopped (a restart neither resets nor
// spends a deadline while the gateway was down).
func Restore(p Persisted, events []Event, now time.Time) *Run {
	r := &Run{
		Identity: p.Identity, State: p.State, Counters: p.Counters,
		MaxSteps: p.MaxSteps, DeadlineMs: p.DeadlineMs, Created: p.Created, start: now,
		ElapsedOffset: time.Duration(p.ElapsedMs) * time.Millisecond, Ended: p.Ended,
		LastAction: p.LastAction, Partial: p.Partial, Termination: p.Termination,
		WouldTerminate: p.WouldTerminate, Children: p.Children, Outstanding: p.Outstanding, Events: events,
	}
	r.Counters.EstimatedCost, r.Counters.ActualCost = p.EstimatedCost, p.ActualCost
	r.seqBase = p.LastEventSeq
	if n := len(events); n > 0 {
		r.seqBase = events[0].Seq - 1
	}
	if r.Termination != nil {
		r.Termination.ResumeToken = p.ResumeToken
	}
	if !r.Ended.IsZero() {
		// Elapsed of an ended run is frozen at its end.
		r.ElapsedOffset = time.Duration(p.ElapsedMs) * time.Millisecond
		r.Ended = now
	}
	return r
}

// TrimEvents lets the oldest events persisted up to seq leave memory once
// more than 2×keep are held, down to the newest keep: the store holds the
// whole timeline, and a long run's events would otherwise be most of its
// memory. An event after seq (not yet persisted) always stays. The caller
// holds Mu.
func (r *Run) TrimEvents(seq int64, keep int) {
	n := len(r.Events)
	if n <= 2*keep {
		return
	}
	drop := n - keep
	for drop > 0 && r.Events[drop-1].Seq > seq {
		drop--
	}
	if drop == 0 {
		return
	}
	r.seqBase = r.Events[drop-1].Seq
	kept := copy(r.Events, r.Events[drop:])
	clear(r.Events[kept:n]) // the array would keep the dropped events' strings alive
	r.Events = r.Events[:kept]
}

// EventsComplete reports whether the run's events in memory begin with its
// first: none has left memory (TrimEvents, or a restore that loaded only
// the newest).
func (r *Run) EventsComplete() bool {
	if len(r.Events) == 0 {
		return r.seqBase == 0
	}
	return r.Events[0].Seq == 1
}

// EventsSince returns the events after seq (the ones not yet persisted).
// The caller holds Mu.
func (r *Run) EventsSince(seq int64) []Event {
	i := len(r.Events)
	for i > 0 && r.Events[i-1].Seq > seq {
		i--
	}
	return r.Events[i:]
}

// LineageKeys returns every lineage key pointing to run id. For restore.
func (g *Registry) LineageKeys(fn func(key, runID string)) {
	for i := range g.sh {
		s := &g.sh[i]
		s.mu.RLock()
		for k, v := range s.lineage {
			fn(k, v)
		}
		s.mu.RUnlock()
	}
}

// Load replaces the run's state by a newer persisted one, in place (other
// goroutines hold this *Run): a replica catching up with what another
// replica did to the same run. Events are replaced when given. The caller
// holds Mu.
func (r *Run) Load(p Persisted, events []Event, now time.Time) {
	fresh := Restore(p, events, now)
	r.Identity, r.State, r.Counters = fresh.Identity, fresh.State, fresh.Counters
	r.MaxSteps, r.DeadlineMs, r.Created = fresh.MaxSteps, fresh.DeadlineMs, fresh.Created
	r.start, r.ElapsedOffset, r.Ended = fresh.start, fresh.ElapsedOffset, fresh.Ended
	r.LastAction, r.Partial, r.Termination = fresh.LastAction, fresh.Partial, fresh.Termination
	r.WouldTerminate, r.Outstanding, r.Children = fresh.WouldTerminate, fresh.Outstanding, fresh.Children
	r.Events = events
	r.seqBase = p.LastEventSeq
	if n := len(events); n > 0 {
		r.seqBase = events[0].Seq - 1
	}
}
