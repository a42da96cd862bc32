package runstate

import (
	"math"
	"time"
)

// Record is the termination record of docs/design.md §5, served by the control plane.
type Record struct {
	Identity
	Status                 State       `json:"status"`
	Reason                 string      `json:"reason,omitempty"`
	Detail                 string      `json:"detail,omitempty"`
	Detector               string      `json:"detector,omitempty"`
	Evidence               []string    `json:"evidence,omitempty"`
	TerminatedAtStep       int64       `json:"terminated_at_step,omitempty"`
	AgentSteps             int64       `json:"agent_steps"`
	MaxSteps               int64       `json:"max_steps"`
	ModelCalls             int64       `json:"model_calls"`
	ToolCalls              int64       `json:"tool_calls"`
	ToolAttempts           int64       `json:"tool_attempts"`
	InputTokens            int64       `json:"input_tokens"`
	OutputTokens           int64       `json:"output_tokens"`
	ReasoningTokens        int64       `json:"reasoning_tokens"`
	CachedTokens           int64       `json:"cached_tokens"`
	CacheWriteTokens       int64       `json:"cache_write_tokens"`
	TotalTokens            int64       `json:"total_tokens"`
	EstimatedCostUSD       float64     `json:"estimated_cost_usd"`
	ActualCostUSD          float64     `json:"actual_cost_usd"`
	ActualCostPicoUSD      int64       `json:"actual_cost_pico_usd"`
	DeadlineMs             int64       `json:"deadline_ms"`
	ElapsedMs              int64       `json:"elapsed_ms"`
	LoopDetectorHits       int64       `json:"loop_detector_hits"`
	LastAction             *Action     `json:"last_action"`
	Recoverable            bool        `json:"recoverable"`
	PartialResultAvailable bool        `json:"partial_result_available"`
	ResumeToken            string      `json:"resume_token,omitempty"`
	WouldTerminate         []ShadowHit `json:"would_terminate,omitempty"`
	// ChildRunIDs are the sub-agent runs that name this run their parent
	// (names): they end when it ends.
	ChildRunIDs []string `json:"child_run_ids,omitempty"`
	Created     string   `json:"created"`
	Ended       string   `json:"ended,omitempty"`
	// Model is the model the run's last model call named; LastActivity is
	// the time of its last event and IdleMs how long ago that was: a run
	// that is not ended and idle for long was most likely abandoned by its
	// agent rather than still working.
	Model        string `json:"model,omitempty"`
	LastActivity string `json:"last_activity,omitempty"`
	IdleMs       int64  `json:"idle_ms"`
}

// picoToUSD converts pico-USD to dollars for display only; ledgers stay in
// integers.
func picoToUSD(p int64) float64 { return math.Round(float64(p)/1e6) / 1e6 }

// Snapshot builds the run's record. The caller holds Mu.
func (r *Run) Snapshot(now time.Time) Record {
	c := r.Counters
	rec := Record{
		Identity:               r.Identity,
		Status:                 r.State,
		AgentSteps:             c.AgentSteps,
		MaxSteps:               r.MaxSteps,
		ModelCalls:             c.ModelCalls,
		ToolCalls:              c.ToolCalls,
		ToolAttempts:           c.ToolAttempts,
		InputTokens:            c.InputTokens,
		OutputTokens:           c.OutputTokens,
		ReasoningTokens:        c.ReasoningTokens,
		CachedTokens:           c.CachedTokens,
		CacheWriteTokens:       c.CacheWriteTokens,
		TotalTokens:            c.InputTokens + c.OutputTokens,
		EstimatedCostUSD:       picoToUSD(c.EstimatedCost),
		ActualCostUSD:          picoToUSD(c.ActualCost),
		ActualCostPicoUSD:      c.ActualCost,
		DeadlineMs:             r.DeadlineMs,
		ElapsedMs:              r.Elapsed(now).Milliseconds(),
		LoopDetectorHits:       c.LoopHits,
		LastAction:             r.LastAction,
		PartialResultAvailable: r.Partial != "",
		WouldTerminate:         r.WouldTerminate,
		Created:                r.Created.UTC().Format(time.RFC3339Nano),
	}
	model, at, idle := r.activity(now)
	rec.Model, rec.LastActivity, rec.IdleMs = model, at, idle.Milliseconds()
	// The record shows names, as the agent knows them, beside the tenant.
	rec.ID, rec.ParentID = NameOf(r.ID), NameOf(r.ParentID)
	for _, c := range r.Children {
		rec.ChildRunIDs = append(rec.ChildRunIDs, NameOf(c))
	}
	if r.State.Final() {
		rec.Ended = r.Ended.UTC().Format(time.RFC3339Nano)
	}
	if t := r.Termination; t != nil {
		rec.Reason = t.Reason
		rec.Detail = t.Detail
		rec.Detector = t.Detector
		rec.Evidence = t.Evidence
		rec.TerminatedAtStep = t.Step
		rec.Recoverable = Recoverable(t.Reason)
		rec.ResumeToken = t.ResumeToken
	} else if r.State == Completed {
		rec.Reason = ReasonCompleted
	}
	return rec
}

// activity is the run's last model, the time of its last event (its
// creation without one) and the time since. The caller holds Mu.
func (r *Run) activity(now time.Time) (model, at string, idle time.Duration) {
	last := r.Created
	if n := len(r.Events); n > 0 {
		if t, err := time.Parse(time.RFC3339Nano, r.Events[n-1].At); err == nil {
			last = t
		}
		for i := n - 1; i >= 0 && model == ""; i-- {
			if r.Events[i].Type == EventModelCall {
				model = r.Events[i].Model
			}
		}
	}
	if idle = now.Sub(last); idle < 0 {
		idle = 0
	}
	return model, last.UTC().Format(time.RFC3339Nano), idle
}
