package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire"
)

// RecordingVersion is the version of the recording format; replay refuses
// a recording of a version it does not know.
const RecordingVersion = 1

// Recording is what the gateway keeps of a run so that the run can be
// replayed under another policy (issue 11): the sequence of model calls
// with their shape, usage and timings, the normalised tool calls and
// observations (the loop guard's own fingerprints), and the decisions
// taken. Prompts, tool arguments and tool results are kept only as hashes
// and sizes unless Content is set.
type Recording struct {
	Version     int    `json:"version"`
	RunID       string `json:"run_id"`
	SessionID   string `json:"session_id,omitempty"`
	ParentRunID string `json:"parent_run_id,omitempty"`
	AgentID     string `json:"agent_id,omitempty"`
	TaskType    string `json:"task_type,omitempty"`
	Tenant      string `json:"tenant,omitempty"`
	Team        string `json:"team,omitempty"`
	User        string `json:"user,omitempty"`
	KeyID       string `json:"key_id,omitempty"`
	// RunBudget is the X-Run-Budget header of the run's first call: a
	// replay grants the run what the agent asked for, tightened by policy.
	RunBudget string `json:"run_budget,omitempty"`
	// Content is true when prompts and tool arguments are kept in clear.
	Content bool `json:"content"`
	// Started is the run's start; every call's ElapsedMs counts from it.
	Started string `json:"started"`
	Updated string `json:"updated"`
	Ended   string `json:"ended,omitempty"`
	// RetainUntil is when the recording is dropped (retention policy).
	RetainUntil string `json:"retain_until,omitempty"`
	MaxCalls    int64  `json:"max_calls"`
	// Truncated is set when the run made more calls than MaxCalls.
	Truncated bool `json:"truncated,omitempty"`
	// Limits and Enforcement are what was in force for the run.
	Limits      policy.Limits     `json:"limits"`
	Enforcement map[string]string `json:"enforcement,omitempty"`
	Calls       []CallRecord      `json:"calls"`
	Outcome     RecordedOutcome   `json:"outcome"`
}

// CallRecord is one model call of a recorded run.
type CallRecord struct {
	// Seq orders the calls as they began.
	Seq       int    `json:"seq"`
	API       string `json:"api"`
	Model     string `json:"model"`
	Stream    bool   `json:"stream,omitempty"`
	BodyBytes int    `json:"body_bytes"`
	// InputEstimate is the estimate of the body's input tokens that the
	// call's reservation was sized on (before the margin).
	InputEstimate   int64 `json:"input_estimate,omitempty"`
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	HasTools        bool  `json:"has_tools,omitempty"`
	Messages        int   `json:"messages"`
	NewUserTurn     bool  `json:"new_user_turn,omitempty"`
	// BodySHA256 is the hash of the request body; Body is the body itself,
	// only with content recording.
	BodySHA256 string          `json:"body_sha256"`
	Body       json.RawMessage `json:"body,omitempty"`
	// ElapsedMs is when the call began, from the run's start; DurationMs
	// how long it took until settled.
	ElapsedMs    int64         `json:"elapsed_ms"`
	DurationMs   int64         `json:"duration_ms"`
	Observations []Observation `json:"observations,omitempty"`
	// Step is the step the gateway admitted the call as (0 when refused
	// before counting).
	Step int64 `json:"step"`
	// Status is the upstream's status (0 when the gateway answered itself).
	Status int `json:"status"`
	// Answered is set when the gateway answered the call itself: the run's
	// termination reason, or "refused" for an error of the gateway.
	Answered     string `json:"answered,omitempty"`
	AnswerStatus int    `json:"answer_status,omitempty"`
	// Failed is set when no upstream response arrived: "timeout" or
	// "error"; or "cut" when its stream ended before its terminal event.
	Failed       string           `json:"failed,omitempty"`
	WrapUp       string           `json:"wrap_up,omitempty"` // the line that made it the wrap-up
	FinishReason string           `json:"finish_reason,omitempty"`
	Usage        wire.Usage       `json:"usage"`
	HasUsage     bool             `json:"has_usage"`
	CostPicoUSD  int64            `json:"cost_pico_usd"`
	ToolCalls    []ToolCallRecord `json:"tool_calls,omitempty"`
}

// Observation is one tool result the call carried back: the loop guard's
// observation fingerprint, its size, and its text only with content
// recording.
type Observation struct {
	CallID  string `json:"call_id"`
	Hash    string `json:"hash"`
	Bytes   int    `json:"bytes"`
	IsError bool   `json:"is_error,omitempty"`
	Content string `json:"content,omitempty"`
}

// ToolCallRecord is one tool call of a model response, normalised: the
// loop guard's fingerprint (volatile fields removed), the size of the
// arguments, and the arguments only with content recording.
type ToolCallRecord struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Fingerprint string          `json:"fingerprint"`
	ArgBytes    int             `json:"arg_bytes"`
	Arguments   json.RawMessage `json:"arguments,omitempty"`
}

// RecordedOutcome is how the recorded run went: its end and its shadow hits.
type RecordedOutcome struct {
	Status         string               `json:"status"`
	Reason         string               `json:"reason,omitempty"`
	Detail         string               `json:"detail,omitempty"`
	Step           int64                `json:"step"`
	Steps          int64                `json:"steps"`
	ModelCalls     int64                `json:"model_calls"`
	CostPicoUSD    int64                `json:"cost_pico_usd"`
	WouldTerminate []runstate.ShadowHit `json:"would_terminate,omitempty"`
}

// recorder is a recorded run's recording as it grows, kept in governance.
type recorder struct {
	rec       Recording
	retention time.Duration
	seq       int
	dirty     bool
	started   time.Time
}

// recordings indexes the recorders of this process for export; a
// recording of a run this process does not hold is read from the store.
type recordings struct {
	mu        sync.Mutex
	byRun     map[string]*runstate.Run
	lastSweep time.Time
}

func (x *recordings) add(r *runstate.Run) {
	x.mu.Lock()
	if x.byRun == nil {
		x.byRun = map[string]*runstate.Run{}
	}
	x.byRun[r.ID] = r
	x.mu.Unlock()
}

// startRecording asks haltline.recording whether the run is recorded. A
// policy that fails here leaves the run unrecorded: recording is an
// observation and must never refuse a call.
func (p *Pipeline) startRecording(ctx context.Context, r *runstate.Run, call *Call, in policy.RunInput, g *governance) {
	if p.pol == nil {
		return
	}
	a, err := p.pol.Recording(ctx, in)
	if err != nil {
		p.log.Warn("recording policy failed; run not recorded", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
		return
	}
	if !a.Enabled || !sampled(r.ID, a.Sample) {
		return
	}
	now := p.now()
	start := now.Add(-r.Elapsed(now))
	g.rec = &recorder{retention: a.Retention(), started: start, rec: Recording{
		Version: RecordingVersion, RunID: r.ID, SessionID: r.SessionID, ParentRunID: r.ParentID,
		AgentID: r.AgentID, TaskType: r.TaskType, Tenant: r.Tenant, Team: r.Team, User: r.User,
		KeyID: call.Principal.KeyID, RunBudget: call.RunBudget, Content: a.Content,
		Started: start.UTC().Format(time.RFC3339Nano), MaxCalls: a.MaxCalls,
		Limits: g.limits, Enforcement: g.term.Enforcement,
	}}
	p.recs.add(r)
}

// sampled decides from the run id, so that every replica decides the same.
func sampled(runID string, frac float64) bool {
	if frac >= 1 {
		return true
	}
	return float64(xxh3.HashString(runID)>>11)/float64(1<<53) < frac
}

// observation is the loop guard's hash of one tool result: computed, or
// during a replay taken from the recording; a recorded run keeps it.
func (t *Turn) observation(g *governance, tr wire.ToolResult) loopguard.Fingerprint {
	fp, ok := t.replayed().observation(tr.CallID)
	if !ok {
		fp = g.canon.Observation(tr.Content)
	}
	if g.rec != nil {
		rec := t.callRecord()
		o := Observation{CallID: tr.CallID, Hash: hex.EncodeToString(fp[:]), Bytes: len(tr.Content), IsError: tr.IsError}
		if g.rec.rec.Content {
			o.Content = string(tr.Content)
		}
		rec.Observations = append(rec.Observations, o)
	}
	return fp
}

// toolFingerprints are the fingerprints of the i-th tool call of a
// response: the loop guard's (its agent's: computed, or during a replay
// taken from the recording), and any agent's, which the tool routes find
// the run by; and the sketch of its arguments for the semantic detector
// (computed: one canonical form of the arguments serves all three; zero
// during a replay of a recording that kept no arguments).
func (t *Turn) toolFingerprints(g *governance, agentID string, i int, tc wire.ToolCall) (fp, anyAgent loopguard.Fingerprint, sk loopguard.Sketch) {
	fp, ok := t.replayed().fingerprint(i)
	if ok {
		anyAgent = g.canon.Fingerprint("", tc.Name, tc.Arguments)
		sk = g.canon.Sketch(agentID, tc.Name, tc.Arguments)
	} else {
		fp, anyAgent, sk = g.canon.CallPrints(agentID, tc.Name, tc.Arguments)
	}
	if g.rec != nil {
		c := ToolCallRecord{ID: tc.ID, Name: tc.Name, Fingerprint: hex.EncodeToString(fp[:]), ArgBytes: len(tc.Arguments)}
		if g.rec.rec.Content && json.Valid(tc.Arguments) {
			c.Arguments = slices.Clone(tc.Arguments)
		}
		rec := t.callRecord()
		rec.ToolCalls = append(rec.ToolCalls, c)
	}
	return fp, anyAgent, sk
}

func (t *Turn) callRecord() *CallRecord {
	if t.rec == nil {
		t.rec = &CallRecord{}
	}
	return t.rec
}

// recordBegin fills the call's shape once Begin decided; a call the gateway
// answered itself is complete here. The caller holds r's mutex.
func (p *Pipeline) recordBegin(t *Turn, r *runstate.Run) {
	g := govOf(r)
	if g == nil || g.rec == nil {
		return
	}
	rec := t.callRecord()
	gr := g.rec
	gr.seq++
	req := &t.Req
	sum := sha256.Sum256(t.Call.Body)
	*rec = CallRecord{Seq: gr.seq, API: req.API.String(), Model: req.Model, Stream: req.Stream,
		BodyBytes: req.BodyBytes, InputEstimate: t.inputEst, MaxOutputTokens: req.MaxOutputTokens, HasTools: req.HasTools,
		Messages: req.Messages, NewUserTurn: req.NewUserTurn, BodySHA256: hex.EncodeToString(sum[:]),
		ElapsedMs: t.started.Sub(gr.started).Milliseconds(), Step: t.step, Observations: rec.Observations}
	if gr.rec.Content && json.Valid(t.Call.Body) {
		rec.Body = slices.Clone(t.Call.Body)
	}
	if t.wrapUp {
		rec.WrapUp = t.wrapLine
	}
	if t.Answer != nil {
		rec.AnswerStatus = t.Answer.Status
		rec.Answered = "refused"
		if r.State.Final() && r.Termination != nil {
			rec.Answered = r.Termination.Reason
		}
		p.appendCall(r, gr, t)
	}
}

// recordFinish completes the call from what Finish read. The caller holds r's mutex.
func (p *Pipeline) recordFinish(t *Turn, out Outcome, cut bool, now time.Time) {
	g := govOf(t.run)
	if g == nil || g.rec == nil || t.rec == nil {
		return
	}
	rec := t.rec
	rec.Status, rec.FinishReason, rec.Usage, rec.CostPicoUSD = out.Status, t.finishReason, t.usage, int64(t.cost)
	rec.HasUsage = t.usage != (wire.Usage{})
	rec.DurationMs = now.Sub(t.started).Milliseconds()
	if cut {
		rec.Failed = "cut"
	}
	if out.Status == 0 {
		rec.Failed = "error"
		if errors.Is(out.Err, context.DeadlineExceeded) {
			rec.Failed = "timeout"
		}
	}
	p.appendCall(t.run, g.rec, t)
}

func (p *Pipeline) appendCall(r *runstate.Run, gr *recorder, t *Turn) {
	gr.dirty = true
	if gr.rec.MaxCalls > 0 && int64(len(gr.rec.Calls)) >= gr.rec.MaxCalls {
		gr.rec.Truncated = true
		return
	}
	gr.rec.Calls = append(gr.rec.Calls, *t.rec)
}

// snapshotRecording is the recording with the run's outcome as of now. The
// caller holds r's mutex.
func snapshotRecording(r *runstate.Run, gr *recorder, now time.Time) Recording {
	rec := gr.rec
	rec.Calls = slices.Clone(rec.Calls)
	slices.SortStableFunc(rec.Calls, func(a, b CallRecord) int { return a.Seq - b.Seq })
	rec.Updated = now.UTC().Format(time.RFC3339Nano)
	c := r.Counters
	out := RecordedOutcome{Status: string(r.State), Steps: c.AgentSteps, ModelCalls: c.ModelCalls,
		CostPicoUSD: c.ActualCost, Step: c.AgentSteps, WouldTerminate: slices.Clone(r.WouldTerminate)}
	if term := r.Termination; term != nil {
		out.Reason, out.Detail = term.Reason, term.Detail
		if term.Step > 0 {
			out.Step = term.Step
		}
	}
	rec.Outcome = out
	if r.State.Final() {
		ended := now
		if !r.Ended.IsZero() {
			ended = r.Ended
		}
		rec.Ended = ended.UTC().Format(time.RFC3339Nano)
		if gr.retention > 0 {
			rec.RetainUntil = ended.Add(gr.retention).UTC().Format(time.RFC3339Nano)
		}
	}
	return rec
}

// recordingOps adds the run's recording to a persist when it changed. The
// caller holds r's mutex.
func (p *Pipeline) recordingOps(r *runstate.Run, g *governance, now time.Time, ops []store.Op) []store.Op {
	if g.rec == nil || !g.rec.dirty {
		return ops
	}
	v, err := json.Marshal(snapshotRecording(r, g.rec, now))
	if err != nil {
		return ops
	}
	g.rec.dirty = false
	return append(ops, store.Op{Bucket: store.Recordings, Key: []byte(r.ID), Value: v})
}

// Recordings returns the recordings of runs active since the given time,
// oldest first: those this process holds, then the store's. Expired ones
// (past their retention) are left out. They name runs as their records do,
// by name beside the tenant (a replay scopes the name again).
func (p *Pipeline) Recordings(since time.Time) ([]Recording, error) {
	now := p.now()
	var out []Recording
	seen := map[string]bool{}
	keep := func(rec Recording) bool {
		if rec.RetainUntil != "" {
			if until, err := time.Parse(time.RFC3339Nano, rec.RetainUntil); err == nil && now.After(until) {
				return false
			}
		}
		if since.IsZero() {
			return true
		}
		up, err := time.Parse(time.RFC3339Nano, rec.Updated)
		return err != nil || !up.Before(since)
	}
	p.recs.mu.Lock()
	runs := make([]*runstate.Run, 0, len(p.recs.byRun))
	for _, r := range p.recs.byRun {
		runs = append(runs, r)
	}
	p.recs.mu.Unlock()
	for _, r := range runs {
		r.Lock()
		var rec Recording
		ok := false
		if g := govOf(r); g != nil && g.rec != nil {
			rec, ok = snapshotRecording(r, g.rec, now), true
		}
		r.Unlock()
		if ok {
			seen[rec.RunID] = true
			if keep(rec) {
				out = append(out, rec)
			}
		}
	}
	if st := p.opts.Store; st != nil {
		err := st.Scan(store.Recordings, func(k, v []byte) error {
			if seen[string(k)] {
				return nil
			}
			var rec Recording
			if err := json.Unmarshal(v, &rec); err != nil {
				return nil // a damaged record is skipped, never fatal to an export
			}
			if keep(rec) {
				out = append(out, rec)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("recordings: %w", err)
		}
	}
	for i := range out {
		out[i].RunID, out[i].ParentRunID = runstate.NameOf(out[i].RunID), runstate.NameOf(out[i].ParentRunID)
	}
	slices.SortFunc(out, func(a, b Recording) int {
		if a.Started != b.Started {
			if a.Started < b.Started {
				return -1
			}
			return 1
		}
		if a.RunID < b.RunID {
			return -1
		}
		return 1
	})
	return out, nil
}

// recordingSweepEvery spaces retention sweeps: a recording outlives its
// retention by at most this much.
const recordingSweepEvery = time.Hour

// SweepRecordings drops recordings past their retention, in memory and in
// the store; it runs from the sweeper at most once an hour unless forced.
func (p *Pipeline) SweepRecordings(force bool) int {
	now := p.now()
	p.recs.mu.Lock()
	if !force && now.Sub(p.recs.lastSweep) < recordingSweepEvery {
		p.recs.mu.Unlock()
		return 0
	}
	p.recs.lastSweep = now
	runs := make([]*runstate.Run, 0, len(p.recs.byRun))
	for _, r := range p.recs.byRun {
		runs = append(runs, r)
	}
	p.recs.mu.Unlock()
	expired := func(rec *Recording) bool {
		until, err := time.Parse(time.RFC3339Nano, rec.RetainUntil)
		return rec.RetainUntil != "" && err == nil && now.After(until)
	}
	dropped := 0
	for _, r := range runs {
		r.Lock()
		g := govOf(r)
		gone := g == nil || g.rec == nil
		if !gone && r.State.Final() {
			rec := snapshotRecording(r, g.rec, now)
			if expired(&rec) {
				g.rec, gone = nil, true
				dropped++
			}
		}
		r.Unlock()
		if gone {
			p.recs.mu.Lock()
			delete(p.recs.byRun, r.ID)
			p.recs.mu.Unlock()
		}
	}
	if st := p.opts.Store; st != nil {
		var ops []store.Op
		_ = st.Scan(store.Recordings, func(k, v []byte) error {
			var rec Recording
			if json.Unmarshal(v, &rec) == nil && expired(&rec) {
				ops = append(ops, store.Op{Bucket: store.Recordings, Key: slices.Clone(k)})
			}
			return nil
		})
		if len(ops) > 0 {
			if err := <-st.Apply(ops); err != nil {
				p.log.Warn("dropping expired recordings failed", "err", err)
			} else {
				dropped += len(ops)
			}
		}
	}
	return dropped
}

// callCost prices a recorded call's usage with a catalog; false when the
// model has no price.
func callCost(c *accounting.Catalog, rec *CallRecord) (accounting.Money, bool) {
	price, ok := c.Lookup(rec.Model)
	if !ok {
		return 0, false
	}
	return price.Cost(apiOf(rec.API).Provider(), rec.Usage), true
}

// apiOf reads back API.String.
func apiOf(s string) wire.API {
	for _, a := range []wire.API{wire.APIChat, wire.APIResponses, wire.APIMessages} {
		if a.String() == s {
			return a
		}
	}
	return wire.APIUnknown
}
