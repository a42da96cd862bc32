package pipeline

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Replay runs recorded runs through the real pipeline — Begin and Finish,
// with the termination lines, ledgers, loop guard and policies of a
// candidate policy set — with no network and no upstream: each recorded
// call is fed as a request of its recorded shape, and answered with its
// recorded response. Where the fingerprints of tool calls and observations
// would come from the arguments and results, the recorded fingerprints are
// used (when the recording kept the content, it is used instead, so that a
// candidate's volatile keys apply).

// ReplayOptions configure a replay.
type ReplayOptions struct {
	// Policy is the candidate policy set; nil means the embedded defaults.
	Policy *policy.Engine
	// Catalog prices the calls; nil means the embedded catalog.
	Catalog *accounting.Catalog
	// Workers replays that many runs at once; 0 means GOMAXPROCS.
	Workers int
}

// ReplayOutcome is where a run ended, recorded or replayed.
type ReplayOutcome struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Step is the step the run ended at (its last step when it did not end).
	Step       int64   `json:"step"`
	ModelCalls int64   `json:"model_calls"`
	CostUSD    float64 `json:"cost_usd"`
	// CostPicoUSD is priced with the replay's catalog, recorded and
	// replayed alike, so that their difference is the policy's alone.
	CostPicoUSD    int64                `json:"cost_pico_usd"`
	WouldTerminate []runstate.ShadowHit `json:"would_terminate,omitempty"`
}

// RunReplay compares one run's recorded and replayed ends.
type RunReplay struct {
	RunID    string        `json:"run_id"`
	Tenant   string        `json:"tenant,omitempty"`
	Team     string        `json:"team,omitempty"`
	TaskType string        `json:"task_type,omitempty"`
	Recorded ReplayOutcome `json:"recorded"`
	Replayed ReplayOutcome `json:"replayed"`
	// Changed is true when the run ends elsewhere, or for another reason.
	Changed bool `json:"changed"`
	// BeyondRecording is set when the candidate lets the run go on past
	// its last recorded call: what it would have done next is unknown, and
	// the replayed spend is a lower bound.
	BeyondRecording bool `json:"beyond_recording,omitempty"`
	// SavedUSD is recorded spend less replayed spend (both priced with the
	// replay's catalog): positive is saved, negative is spend added.
	SavedUSD float64 `json:"saved_usd"`
	Error    string  `json:"error,omitempty"`
}

// ReplayTotals sums a replay.
type ReplayTotals struct {
	Runs            int            `json:"runs"`
	Changed         int            `json:"changed"`
	EndedEarlier    int            `json:"ended_earlier"`
	EndedLater      int            `json:"ended_later"`
	BeyondRecording int            `json:"beyond_recording"`
	Errors          int            `json:"errors"`
	RecordedCostUSD float64        `json:"recorded_cost_usd"`
	ReplayedCostUSD float64        `json:"replayed_cost_usd"`
	SavedUSD        float64        `json:"saved_usd"`
	RecordedReasons map[string]int `json:"recorded_reasons"`
	ReplayedReasons map[string]int `json:"replayed_reasons"`
}

// ReplayReport is the result of a replay, one entry per run in input order.
type ReplayReport struct {
	Runs  []RunReplay  `json:"runs"`
	Total ReplayTotals `json:"total"`
}

// Replay replays recordings under o's policy and catalog.
func Replay(ctx context.Context, o ReplayOptions, recs []Recording) (*ReplayReport, error) {
	if o.Policy == nil {
		pol, err := policy.New(ctx, policy.Options{})
		if err != nil {
			return nil, err
		}
		o.Policy = pol
	}
	if o.Catalog == nil {
		o.Catalog = accounting.DefaultCatalog()
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	rep := &ReplayReport{Runs: make([]RunReplay, len(recs))}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(workers, max(len(recs), 1)) {
		wg.Go(func() {
			for i := range next {
				rep.Runs[i] = replayRun(ctx, o, &recs[i])
			}
		})
	}
	for i := range recs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Total = totals(rep.Runs)
	return rep, nil
}

func totals(runs []RunReplay) ReplayTotals {
	t := ReplayTotals{Runs: len(runs), RecordedReasons: map[string]int{}, ReplayedReasons: map[string]int{}}
	var rec, rep int64
	for _, r := range runs {
		if r.Error != "" {
			t.Errors++
			continue
		}
		rec += r.Recorded.CostPicoUSD
		rep += r.Replayed.CostPicoUSD
		t.RecordedReasons[reasonKey(r.Recorded)]++
		t.ReplayedReasons[reasonKey(r.Replayed)]++
		if r.BeyondRecording {
			t.BeyondRecording++
		}
		if !r.Changed {
			continue
		}
		t.Changed++
		switch {
		case r.BeyondRecording || r.Replayed.Step > r.Recorded.Step:
			t.EndedLater++
		case r.Replayed.Step < r.Recorded.Step || r.Replayed.ModelCalls < r.Recorded.ModelCalls:
			t.EndedEarlier++
		}
	}
	t.RecordedCostUSD, t.ReplayedCostUSD = accounting.Money(rec).USD(), accounting.Money(rep).USD()
	t.SavedUSD = accounting.Money(rec - rep).USD()
	return t
}

func reasonKey(o ReplayOutcome) string {
	if o.Reason != "" {
		return o.Reason
	}
	return o.Status
}

// errBeyond is the outcome given to a replayed call that the recording has
// no response for: the recorded run never made it.
var errBeyond = errors.New("replay: beyond the recording")

// errUpstream replays a recorded call whose upstream never answered.
var errUpstream = errors.New("replay: the recorded upstream did not answer")

// replayRun drives one recording through a pipeline of its own, on a clock
// that follows the recorded timings.
func replayRun(ctx context.Context, o ReplayOptions, rec *Recording) RunReplay {
	out := RunReplay{RunID: runstate.NameOf(rec.RunID), Tenant: rec.Tenant, Team: rec.Team, TaskType: rec.TaskType}
	if rec.Version != RecordingVersion {
		out.Error = fmt.Sprintf("recording version %d, want %d", rec.Version, RecordingVersion)
		return out
	}
	start, err := time.Parse(time.RFC3339Nano, rec.Started)
	if err != nil {
		out.Error = "bad start time: " + err.Error()
		return out
	}
	out.Recorded = recordedOutcome(o.Catalog, rec)
	clock := start
	p := New(Options{Policy: o.Policy, Catalog: o.Catalog, Now: func() time.Time { return clock },
		Lease: 365 * 24 * time.Hour})
	id := runstate.ScopedID(rec.Tenant, runstate.NameOf(rec.RunID))
	calls := slices.Clone(rec.Calls)
	slices.SortStableFunc(calls, func(a, b CallRecord) int { return a.Seq - b.Seq })
	beyond := false
	for i := range calls {
		c := &calls[i]
		clock = start.Add(time.Duration(c.ElapsedMs) * time.Millisecond)
		rt, req, resp, err := replayCall(c)
		if err != nil {
			out.Error = fmt.Sprintf("call %d: %v", c.Seq, err)
			return out
		}
		// The run is named as its agent named it, in its tenant. Its parent
		// is not: a replay runs one recording alone, without the parent
		// run whose budget the recorded calls also drew on.
		call := &Call{API: req.API, RunID: runstate.NameOf(rec.RunID), SessionID: rec.SessionID, AgentID: rec.AgentID,
			TaskType: rec.TaskType, RunBudget: rec.RunBudget,
			Principal: Principal{Tenant: rec.Tenant, Team: rec.Team, User: rec.User, KeyID: rec.KeyID}}
		codec := &replayCodec{req: req, resp: resp}
		t := p.beginReplay(ctx, call, codec, rt)
		if t.Answer != nil {
			p.Finish(ctx, t, Outcome{Status: t.Answer.Status})
			if runEnded(p, id) {
				break
			}
			continue // refused without ending (as the recorded call may have been)
		}
		if c.Answered != "" {
			// The recorded gateway answered this call itself; the candidate
			// forwards it, and no model ever answered it.
			beyond = true
			p.Finish(ctx, t, Outcome{Err: errBeyond})
			break
		}
		clock = clock.Add(time.Duration(c.DurationMs) * time.Millisecond)
		if t.wrapUp {
			// The wrap-up goes without tools and with its output capped.
			codec.resp.ToolCalls = nil
			codec.resp.Usage.OutputTokens = min(codec.resp.Usage.OutputTokens, t.wrapOut)
		}
		res := Outcome{Status: c.Status}
		if c.Status == 0 { // the upstream never answered
			res.Err = errUpstream
			if c.Failed == "timeout" {
				res.Err = context.DeadlineExceeded
			}
		}
		p.Finish(ctx, t, res)
		if runEnded(p, id) {
			break
		}
	}
	out.Replayed = replayedOutcome(p, id, clock)
	if !beyond && runstate.State(out.Recorded.Status).Final() && !runstate.State(out.Replayed.Status).Final() {
		beyond = true // the recorded end came from a line the candidate does not draw
	}
	out.BeyondRecording = beyond
	out.Changed = beyond || out.Recorded.Status != out.Replayed.Status ||
		out.Recorded.Reason != out.Replayed.Reason || out.Recorded.Step != out.Replayed.Step
	out.SavedUSD = accounting.Money(out.Recorded.CostPicoUSD - out.Replayed.CostPicoUSD).USD()
	return out
}

// beginReplay is Begin with the turn's recorded fingerprints in place
// before the request is observed.
func (p *Pipeline) beginReplay(ctx context.Context, call *Call, codec *replayCodec, rt *replayTurn) *Turn {
	codec.turn = rt
	return p.Begin(ctx, call, codec)
}

// replayed is the turn's recorded fingerprints when it is a replayed call
// (its codec is the replay's), nil for every live call.
func (t *Turn) replayed() *replayTurn {
	if c, ok := t.codec.(*replayCodec); ok {
		return c.turn
	}
	return nil
}

func runEnded(p *Pipeline, id string) bool {
	r := p.runs.Get(id)
	if r == nil {
		return true
	}
	r.Lock()
	defer r.Unlock()
	return r.State.Final()
}

func recordedOutcome(cat *accounting.Catalog, rec *Recording) ReplayOutcome {
	o := rec.Outcome
	out := ReplayOutcome{Status: o.Status, Reason: o.Reason, Detail: o.Detail, Step: o.Step,
		ModelCalls: o.ModelCalls, WouldTerminate: o.WouldTerminate}
	var cost accounting.Money
	for i := range rec.Calls {
		c := &rec.Calls[i]
		if c.Status < 200 || c.Status > 299 {
			continue
		}
		if m, ok := callCost(cat, c); ok {
			cost += m
		} else {
			cost += accounting.Money(c.CostPicoUSD)
		}
	}
	if rec.Truncated { // calls past MaxCalls are known only by the run's total
		cost = max(cost, accounting.Money(o.CostPicoUSD))
	}
	out.CostPicoUSD, out.CostUSD = int64(cost), cost.USD()
	return out
}

func replayedOutcome(p *Pipeline, id string, now time.Time) ReplayOutcome {
	r := p.runs.Get(id)
	if r == nil {
		return ReplayOutcome{Status: "not_started"}
	}
	r.Lock()
	defer r.Unlock()
	s := r.Snapshot(now)
	out := ReplayOutcome{Status: string(s.Status), Reason: s.Reason, Detail: s.Detail, Step: s.AgentSteps,
		ModelCalls: s.ModelCalls, CostPicoUSD: r.Counters.ActualCost, WouldTerminate: s.WouldTerminate}
	if s.Status == runstate.Completed {
		out.Reason = "" // the record's reason for a plain completion is empty, as recorded
	}
	if r.Termination != nil && r.Termination.Step > 0 {
		out.Step = r.Termination.Step
	}
	out.CostUSD = accounting.Money(out.CostPicoUSD).USD()
	return out
}

// replayTurn carries a replayed call's recorded fingerprints; its methods
// answer "none" on a nil receiver, which is every live call.
type replayTurn struct {
	obs map[string]loopguard.Fingerprint
	fps []loopguard.Fingerprint
	has []bool
	// inputEst is the call's input estimate (see recordedEstimate).
	inputEst int64
}

func (rt *replayTurn) observation(callID string) (loopguard.Fingerprint, bool) {
	if rt == nil {
		return loopguard.Fingerprint{}, false
	}
	fp, ok := rt.obs[callID]
	return fp, ok
}

func (rt *replayTurn) fingerprint(i int) (loopguard.Fingerprint, bool) {
	if rt == nil || i >= len(rt.fps) || !rt.has[i] {
		return loopguard.Fingerprint{}, false
	}
	return rt.fps[i], true
}

// replayCall rebuilds a call's parsed request and response, and the
// fingerprints to use where the content was not kept.
func replayCall(c *CallRecord) (*replayTurn, wire.Request, wire.Response, error) {
	api := apiOf(c.API)
	if api == wire.APIUnknown {
		return nil, wire.Request{}, wire.Response{}, fmt.Errorf("unknown api %q", c.API)
	}
	rt := &replayTurn{obs: map[string]loopguard.Fingerprint{}, inputEst: recordedEstimate(api, c)}
	req := wire.Request{API: api, Model: c.Model, Stream: false, MaxOutputTokens: c.MaxOutputTokens,
		HasTools: c.HasTools, BodyBytes: c.BodyBytes, Messages: c.Messages, NewUserTurn: c.NewUserTurn}
	for _, ob := range c.Observations {
		tr := wire.ToolResult{CallID: ob.CallID, IsError: ob.IsError}
		if ob.Content != "" {
			tr.Content = []byte(ob.Content)
		} else {
			fp, err := parseFingerprint(ob.Hash)
			if err != nil {
				return nil, req, wire.Response{}, err
			}
			rt.obs[ob.CallID] = fp
		}
		req.ToolResults = append(req.ToolResults, tr)
	}
	resp := wire.Response{Model: c.Model, Usage: c.Usage, HasUsage: c.HasUsage || c.FinishReason != "",
		FinishReason: c.FinishReason}
	for _, tc := range c.ToolCalls {
		w := wire.ToolCall{ID: tc.ID, Name: tc.Name}
		fp, has := loopguard.Fingerprint{}, false
		if len(tc.Arguments) > 0 {
			w.Arguments = tc.Arguments
		} else {
			var err error
			if fp, err = parseFingerprint(tc.Fingerprint); err != nil {
				return nil, req, resp, err
			}
			has = true
		}
		resp.ToolCalls = append(resp.ToolCalls, w)
		rt.fps, rt.has = append(rt.fps, fp), append(rt.has, has)
	}
	return rt, req, resp, nil
}

func parseFingerprint(s string) (loopguard.Fingerprint, error) {
	var fp loopguard.Fingerprint
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(fp) {
		return fp, fmt.Errorf("bad fingerprint %q", s)
	}
	copy(fp[:], b)
	return fp, nil
}

// replayCodec is the wire codec of a replayed call: it hands Begin the
// recorded request and Finish the recorded response, and renders nothing
// that anyone reads.
type replayCodec struct {
	req  wire.Request
	resp wire.Response
	turn *replayTurn
}

func (c *replayCodec) API() wire.API { return c.req.API }

func (c *replayCodec) ParseRequest([]byte) (wire.Request, error) { return c.req, nil }

func (c *replayCodec) PrepareUpstream(body []byte, _ *wire.Request, _ int64) ([]byte, error) {
	return body, nil
}

func (c *replayCodec) WrapUp(body []byte, _ *wire.Request, _ string, _ int64) ([]byte, error) {
	return body, nil
}

func (c *replayCodec) ParseResponse([]byte) (wire.Response, error) { return c.resp, nil }

func (c *replayCodec) NewStreamTap(*wire.Request) wire.StreamTap { return nil }

func (c *replayCodec) SyntheticFinal(*wire.Request, string) (string, []byte) {
	return "application/json", []byte(`{}`)
}

func (c *replayCodec) ErrorBody(wire.ErrorKind, string, []byte) []byte { return []byte(`{}`) }

// recordedEstimate is the input estimate the recorded gateway reserved on:
// as recorded; for a recording that predates it, the estimate of the
// recorded body, or without the body one token per four of its bytes (the
// estimator's ratio on English prose).
func recordedEstimate(api wire.API, c *CallRecord) int64 {
	switch {
	case c.InputEstimate > 0:
		return c.InputEstimate
	case len(c.Body) > 0:
		return contextmgr.Estimate(api, c.Body)
	}
	return int64(c.BodyBytes+3) / 4
}
