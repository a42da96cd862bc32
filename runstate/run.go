package runstate

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"sync"
	"time"
)

// Counters are a run's meters (docs/design.md §4). Money is in pico-USD.
type Counters struct {
	AgentSteps       int64 `json:"agent_steps"`
	ModelCalls       int64 `json:"model_calls"`
	ToolCalls        int64 `json:"tool_calls"`
	ToolAttempts     int64 `json:"tool_attempts"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	EstimatedCost    int64 `json:"-"`
	ActualCost       int64 `json:"-"`
	LoopHits         int64 `json:"loop_detector_hits"`
}

// Identity is who a run belongs to; tenant, team and user come from the
// credential, never from headers.
type Identity struct {
	ID        string `json:"run_id"`
	SessionID string `json:"session_id"`
	ParentID  string `json:"parent_run_id,omitempty"`
	AgentID   string `json:"agent_id,omitempty"`
	TaskType  string `json:"task_type,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Team      string `json:"team,omitempty"`
	User      string `json:"user,omitempty"`
}

// Action is the last tool action of a run, arguments hashed.
type Action struct {
	Tool          string `json:"tool"`
	ArgumentsHash string `json:"arguments_hash"`
}

// ShadowHit is a termination line that fired in shadow mode.
type ShadowHit struct {
	Line     string `json:"line"`
	Step     int64  `json:"step"`
	Detector string `json:"detector,omitempty"`
	Evidence string `json:"evidence,omitempty"`
	At       string `json:"at"`
}

// Termination says why and how a run ended.
type Termination struct {
	Reason      string   `json:"reason"`
	Detail      string   `json:"detail,omitempty"`
	Detector    string   `json:"detector,omitempty"`
	Step        int64    `json:"step"`
	Evidence    []string `json:"evidence,omitempty"`
	Mode        string   `json:"mode,omitempty"` // finalize | reject | wrap_up
	ResumeToken string   `json:"-"`
}

// Run is one agent task. All fields are guarded by its mutex (Lock,
// Unlock); the pipeline holds it across a stage so that the checks and the
// transition are one step.
type Run struct {
	mu sync.Mutex
	Identity
	State    State
	Counters Counters
	// Limits shown in the record; 0 means none.
	MaxSteps   int64
	DeadlineMs int64
	// Created is the wall time of the first call; start is its monotonic
	// reading, from which elapsed time and the deadline are measured.
	Created time.Time
	start   time.Time
	// ElapsedOffset carries elapsed time over a restart.
	ElapsedOffset  time.Duration
	Ended          time.Time
	LastAction     *Action
	Partial        string // head of the last assistant text: the partial result
	Termination    *Termination
	WouldTerminate []ShadowHit
	// Children are the IDs of the runs that name this one their parent:
	// the runs its end ends too (see AddChild).
	Children []string
	Events   []Event
	// Inflight counts model and tool calls in flight: the state is deciding
	// or executing_tools while they run.
	Inflight int
	// Outstanding are the tool calls of the last model response that no
	// result has answered yet, by call id.
	Outstanding map[string]OutstandingCall
	// Ext holds the pipeline's per-run governance state.
	Ext any
	// seqBase is the last event sequence number before Events (events that
	// live only in the store, loaded from another replica).
	seqBase int64
	// cancels are the in-flight calls' cancel functions, for cancel.
	cancels    map[uint64]func()
	nextCancel uint64
	// atTime and atText are the last event's time and its rendering: the
	// events of one step share their time, rendered once.
	atTime time.Time
	atText string
}

// OutstandingCall is a tool call the model asked for and the framework has
// not answered yet.
type OutstandingCall struct {
	Name        string
	Fingerprint string
}

func newRun(id Identity, now time.Time) *Run {
	return &Run{Identity: id, State: Ready, Created: now, start: now}
}

// Elapsed is the run's age on the monotonic clock.
func (r *Run) Elapsed(now time.Time) time.Duration {
	if !r.Ended.IsZero() {
		now = r.Ended
	}
	return now.Sub(r.start) + r.ElapsedOffset
}

// Remaining is the time left before the run's deadline, or a very long time
// without one.
func (r *Run) Remaining(now time.Time) time.Duration {
	if r.DeadlineMs <= 0 {
		return 1<<63 - 1
	}
	return time.Duration(r.DeadlineMs)*time.Millisecond - r.Elapsed(now)
}

// Transition moves the run to s and records the event. It refuses to leave
// a final state.
func (r *Run) Transition(s State, now time.Time, detail string) bool {
	if r.State == s || r.State.Final() {
		return false
	}
	from := r.State
	r.State = s
	r.event(now, Event{Type: EventTransition, From: from, To: s, Detail: detail})
	if s.Final() {
		r.Ended = now
	}
	return true
}

// Record appends an event of another type.
func (r *Run) Record(now time.Time, ev Event) { r.event(now, ev) }

// maxEvents bounds a run's in-memory event log; older events are dropped
// from memory (the store keeps them) with a marker.
const maxEvents = 4096

// firstEvents is the room a run's first event makes for its events.
const firstEvents = 8

func (r *Run) event(now time.Time, ev Event) {
	ev.Seq = r.seqBase + 1
	if n := len(r.Events); n > 0 {
		ev.Seq = r.Events[n-1].Seq + 1
	}
	if !now.Equal(r.atTime) || r.atText == "" {
		r.atTime, r.atText = now, now.UTC().Format(time.RFC3339Nano)
	}
	ev.At = r.atText
	ev.ElapsedMs = r.Elapsed(now).Milliseconds()
	if ev.Step == 0 {
		ev.Step = r.Counters.AgentSteps
	}
	switch {
	case r.Events == nil:
		// A step records about four events: room for two steps at once,
		// where growing from one reallocated at the 2nd, 3rd, 5th and 9th.
		r.Events = make([]Event, 0, firstEvents)
	case len(r.Events) >= maxEvents:
		copy(r.Events, r.Events[len(r.Events)/4:])
		r.Events = r.Events[:len(r.Events)-len(r.Events)/4]
	}
	r.Events = append(r.Events, ev)
}

// Terminate ends the run with state s and the termination t.
func (r *Run) Terminate(s State, t Termination, now time.Time) bool {
	if r.State.Final() {
		return false
	}
	if t.Step == 0 {
		t.Step = r.Counters.AgentSteps
	}
	if Recoverable(t.Reason) {
		t.ResumeToken = newToken()
	}
	r.Termination = &t
	r.Transition(s, now, t.Reason)
	// Calls already admitted keep their reservations and finish: only an
	// operator's cancel cuts them (CancelInflight).
	return true
}

// Lock takes the run's mutex, which guards all its fields.
func (r *Run) Lock() { r.mu.Lock() }

// Unlock lets go of the run's mutex.
func (r *Run) Unlock() { r.mu.Unlock() }

// TryLock takes the run's mutex when it is free, and reports whether it did.
func (r *Run) TryLock() bool { return r.mu.TryLock() }

// AddCancel registers an in-flight call's cancel function; the returned
// function unregisters it.
func (r *Run) AddCancel(cancel func()) (remove func()) {
	if r.cancels == nil {
		r.cancels = map[uint64]func(){}
	}
	r.nextCancel++
	k := r.nextCancel
	r.cancels[k] = cancel
	return func() {
		r.Lock()
		delete(r.cancels, k)
		r.Unlock()
	}
}

// CancelInflight cancels every call in flight (operator cancel).
func (r *Run) CancelInflight() {
	for k, c := range r.cancels {
		c()
		delete(r.cancels, k)
	}
}

// AddChild lists a sub-agent run of this one; it reports whether the run
// was not listed yet.
func (r *Run) AddChild(id string) bool {
	if slices.Contains(r.Children, id) {
		return false
	}
	r.Children = append(r.Children, id)
	return true
}

// Resume reopens a recoverable run; the caller raises its budget.
func (r *Run) Resume(token string, now time.Time) bool {
	if !r.State.Final() || r.Termination == nil || !Recoverable(r.Termination.Reason) {
		return false
	}
	if token != "" && token != r.Termination.ResumeToken {
		return false
	}
	from := r.State
	prev := r.Termination.Reason
	r.Termination = nil
	r.Ended = time.Time{}
	r.State = Ready
	r.event(now, Event{Type: EventResumed, From: from, To: Ready, Detail: prev})
	return true
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewID returns a fresh id: prefix and 72 random bits.
func NewID(prefix string) string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NewRunID returns a fresh run id: "r-", the second it was made (8 hex
// digits) and 72 random bits. Ids made together sort together, and the
// embedded store keys a run's snapshot, timeline and own ledger by its id:
// a checkpoint then rewrites the pages at the end of each bucket, where
// random ids rewrote a page per run, scattered over a store with history
// (BenchmarkCheckpointWithHistory in pipeline). The random bits keep ids
// made in the same second apart, and as hard to guess as wholly random ids.
func NewRunID(now time.Time) string {
	var b [4 + 9]byte
	binary.BigEndian.PutUint32(b[:4], uint32(now.Unix())) // until 2106
	_, _ = rand.Read(b[4:])
	return "r-" + hex.EncodeToString(b[:])
}

// Reopen lets a completed run go on when the agent explicitly continues it
// (same X-Run-Id) after its final answer.
func (r *Run) Reopen(now time.Time) bool {
	if r.State != Completed {
		return false
	}
	r.Ended = time.Time{}
	r.State = Ready
	r.event(now, Event{Type: EventTransition, From: Completed, To: Ready, Detail: "continued after a final answer"})
	return true
}
