package policy

import (
	"encoding/json"
	"time"
)

// Principal is who the credential says is calling; never from headers.
type Principal struct {
	Tenant string `json:"tenant"`
	Team   string `json:"team"`
	User   string `json:"user"`
	KeyID  string `json:"key_id"`
}

// RunInfo is the run as the state machine knows it when a question is asked.
type RunInfo struct {
	ID            string  `json:"id"`
	SessionID     string  `json:"session_id"`
	ParentID      string  `json:"parent_id"`
	AgentID       string  `json:"agent_id"`
	TaskType      string  `json:"task_type"`
	State         string  `json:"state"`
	ExpectedSteps int64   `json:"expected_steps"`
	Steps         int64   `json:"steps"`
	ModelCalls    int64   `json:"model_calls"`
	ToolCalls     int64   `json:"tool_calls"`
	InputTokens   int64   `json:"input_tokens"`
	OutputTokens  int64   `json:"output_tokens"`
	ElapsedMs     int64   `json:"elapsed_ms"`
	CostUSD       float64 `json:"cost_usd"`
}

// RunInput is the input of the per-run questions (budget, loop,
// termination) and the common part of the per-call ones. Headers is the
// allow-listed set of request headers, keys in lower case.
type RunInput struct {
	Principal Principal         `json:"principal"`
	Run       RunInfo           `json:"run"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// Limits is the budget vector and the soft lines of a run. A zero limit
// means no limit.
type Limits struct {
	MaxSteps        int64            `json:"max_steps,omitempty"`
	DeadlineMs      int64            `json:"deadline_ms,omitempty"`
	MaxTokens       int64            `json:"max_tokens,omitempty"`
	MaxInputTokens  int64            `json:"max_input_tokens,omitempty"`
	MaxOutputTokens int64            `json:"max_output_tokens,omitempty"`
	MaxToolCalls    int64            `json:"max_tool_calls,omitempty"`
	MaxCostUSD      float64          `json:"max_cost_usd,omitempty"`
	ToolQuotas      map[string]int64 `json:"tool_quotas,omitempty"`

	// SoftCompress and SoftWrapUp are fractions of each budget at which the
	// context is compressed harder and the run is wrapped up.
	SoftCompress float64 `json:"soft_compress,omitempty"`
	SoftWrapUp   float64 `json:"soft_wrapup,omitempty"`
	// FinalReserve is the fraction of each budget kept for the wrap-up.
	FinalReserve float64 `json:"final_reserve,omitempty"`
	// PausedTime is "flow" (paused time counts against the deadline) or
	// "freeze".
	PausedTime string `json:"paused_time,omitempty"`
	// DefaultMaxOutputTokens is the worst case reserved for a call that
	// does not state its max output.
	DefaultMaxOutputTokens int64 `json:"default_max_output_tokens,omitempty"`
	// MinOutputTokens is the floor of a call's output cap when the gateway
	// lowers it to fit the working budget: below it (or below the call's
	// own cap when that is lower) the call is the run's wrap-up instead.
	MinOutputTokens int64 `json:"min_output_tokens,omitempty"`
	// SummariserModel, when set, is the model the context manager asks for
	// the summary of dropped turns (through the same upstream, charged to
	// the run); without it the summary is extractive.
	SummariserModel string `json:"summariser_model,omitempty"`
	// ParallelSideEffects lets a model be offered parallel tool calls while
	// a tool on offer is L1 or L2; by default the gateway asks for one call
	// at a time and runs such calls one after the other (docs/design.md §6).
	ParallelSideEffects bool `json:"parallel_side_effects,omitempty"`
	// ToolOutput is how long tool output is cut wherever it reaches a
	// model (docs/design.md §6, §8): the policy key tool_output.
	ToolOutput ToolOutput `json:"tool_output,omitzero"`
}

// ToolOutput cuts a tool output longer than Inline characters to its first
// Head and last Tail characters in every request the gateway forwards
// (0: the defaults of docs/design.md §8). Policy writes it as
// {"cut": bool, "inline": n, "head": n, "tail": n, "tools": {name: {"cut": bool}}};
// it is kept inverted (Whole, WholeTools) so that its zero value — a run
// stored before the key existed — cuts, as the default does.
type ToolOutput struct {
	// Whole forwards every tool output whole ("cut": false).
	Whole  bool `json:"whole,omitempty"`
	Inline int  `json:"inline,omitempty"`
	Head   int  `json:"head,omitempty"`
	Tail   int  `json:"tail,omitempty"`
	// WholeTools says, per tool name, whether its output goes whole: true
	// for "cut": false, false for "cut": true (over Whole).
	WholeTools map[string]bool `json:"whole_tools,omitempty"`
	// ReadBack bounds the read-back rounds of one model call: the model
	// calls the gateway's read tool on a cut output, the gateway answers
	// and calls the model again ("read_back": n; 0 turns it off, kept as
	// NoReadBack so that the zero value reads back). 0: ReadBackRounds.
	ReadBack   int  `json:"read_back,omitempty"`
	NoReadBack bool `json:"no_read_back,omitempty"`
}

// ReadBackRounds is the default bound of read-back rounds a model call.
const ReadBackRounds = 3

// Rounds is how many read-back rounds one model call may take.
func (o ToolOutput) Rounds() int {
	switch {
	case o.NoReadBack:
		return 0
	case o.ReadBack > 0:
		return o.ReadBack
	}
	return ReadBackRounds
}

// Keeps reports whether a tool's output is forwarded whole.
func (o ToolOutput) Keeps(tool string) bool {
	if w, ok := o.WholeTools[tool]; ok {
		return w
	}
	return o.Whole
}

// Paused time modes.
const (
	PausedFlow   = "flow"
	PausedFreeze = "freeze"
)

// DefaultMinOutputTokens is the floor of a lowered output cap when policy
// sets none (docs/design.md §5).
const DefaultMinOutputTokens = 1024

// DefaultLimits is the answer when policy sets no budget (docs/design.md §8):
// generous, never in the way of a healthy run.
func DefaultLimits() Limits {
	return Limits{
		MaxSteps:               100,
		DeadlineMs:             30 * 60 * 1000,
		SoftCompress:           0.7,
		SoftWrapUp:             0.9,
		FinalReserve:           0.1,
		PausedTime:             PausedFlow,
		DefaultMaxOutputTokens: 4096,
		ToolOutput:             ToolOutput{Inline: 4096, Head: 1500, Tail: 500},
		MinOutputTokens:        DefaultMinOutputTokens,
	}
}

// ModelInfo describes the model call being admitted.
type ModelInfo struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Stream   bool   `json:"stream"`
	// MaxOutputTokens is what the request asked for; 0 when it did not say.
	MaxOutputTokens int64 `json:"max_output_tokens"`
}

// ModelInput is the input of the model question.
type ModelInput struct {
	RunInput
	Model ModelInfo `json:"model"`
}

// ModelDecision answers the model question. The call is refused when Deny
// is not empty.
type ModelDecision struct {
	// Deny holds the reasons, sorted; empty means the call may go.
	Deny []string
	// MaxOutputTokens caps the requested output; 0 means no cap.
	MaxOutputTokens int64
	// Allowed is the allow-list of models in force, nil when there is none.
	Allowed []string
}

// Allow reports whether no rule denied the call.
func (d ModelDecision) Allow() bool { return len(d.Deny) == 0 }

// ToolInfo describes the tool call being admitted. Arguments reach the
// policy only when a loaded policy reads input.tool.arguments; they never
// reach the decision log.
type ToolInfo struct {
	Name   string `json:"name"`
	Server string `json:"server"`
	// Level is the level the caller resolved from its registry, if any.
	Level string `json:"level"`
	// Hints are MCP tool annotations (readOnlyHint, destructiveHint, …).
	Hints       map[string]bool `json:"hints,omitempty"`
	Arguments   json.RawMessage `json:"arguments,omitempty"`
	Fingerprint string          `json:"fingerprint"`
}

// ToolInput is the input of the tool question.
type ToolInput struct {
	RunInput
	Tool ToolInfo `json:"tool"`
}

// Danger levels (docs/design.md §6).
const (
	LevelReadOnly     = "L0"
	LevelReversible   = "L1"
	LevelIrreversible = "L2"
)

// ToolDecision answers the tool question.
type ToolDecision struct {
	Allow    bool
	Approval bool
	Level    string
	Reason   string
}

// LoopThresholds configures the loop and stall detectors of a run.
type LoopThresholds struct {
	SameInRow      int
	Window         int
	WindowRepeats  int
	MaxCyclePeriod int
	StallSteps     int
	// SemanticRepeats calls of one tool in the last SemanticWindow steps
	// whose argument words are pairwise similar at SemanticSimilarity or
	// more (estimated Jaccard, in (0, 1]), with nothing new observed in
	// between; 0 in either turns the semantic detector off.
	SemanticRepeats    int
	SemanticWindow     int
	SemanticSimilarity float64
	// VolatileKeys are argument keys removed before fingerprinting, sorted.
	VolatileKeys []string
}

// DefaultLoopThresholds is the answer when policy sets none (docs/design.md §8).
func DefaultLoopThresholds() LoopThresholds {
	return LoopThresholds{
		SameInRow:      3,
		Window:         6,
		WindowRepeats:  3,
		MaxCyclePeriod: 3,
		StallSteps:     3,
		// The semantic detector reports on its own line,
		// LineSemanticRepeat, in shadow mode unless policy says otherwise.
		SemanticRepeats:    3,
		SemanticWindow:     6,
		SemanticSimilarity: 0.5,
		VolatileKeys:       DefaultVolatileKeys(),
	}
}

// DefaultVolatileKeys is the Go-side list used when policy gives none; the
// embedded haltline.loop holds the same list.
func DefaultVolatileKeys() []string {
	return []string{
		"correlationId", "correlation_id", "created_at", "cursor_ts", "date",
		"datetime", "idempotencyKey", "idempotency_key", "nonce", "requestId",
		"request_id", "session_token", "spanId", "span_id", "time", "timestamp",
		"traceId", "trace_id", "ts", "updated_at", "uuid",
	}
}

// Termination modes (docs/design.md §5).
const (
	ModeFinalize = "finalize"
	ModeReject   = "reject"
)

// Enforcement modes of a termination line.
const (
	Enforce = "enforce"
	Shadow  = "shadow"
)

// LineSemanticRepeat is the enforcement line of the loop guard's semantic
// detector (near-duplicate arguments with nothing new observed). Its
// verdicts end a run with reason loop_detected, like the other loop
// detectors', but it has a line of its own because it is measured before it
// bites: it runs in shadow mode unless policy lists it.
const LineSemanticRepeat = "semantic_repeat"

// TerminationAnswer says how a run ends and which lines only observe.
type TerminationAnswer struct {
	Mode string
	// Enforcement maps a line (termination reason, or LineSemanticRepeat)
	// to Enforce or Shadow; a line not listed is enforced, except
	// LineSemanticRepeat.
	Enforcement map[string]string
}

// EnforcementOf returns the mode of one line: as listed, otherwise Enforce
// (Shadow for LineSemanticRepeat). The exception lives here rather than in
// the embedded Rego so that a policy directory with its own
// haltline.termination does not turn the semantic detector on by leaving
// it out.
func (a TerminationAnswer) EnforcementOf(line string) string {
	if m, ok := a.Enforcement[line]; ok {
		return m
	}
	if line == LineSemanticRepeat {
		return Shadow
	}
	return Enforce
}

// TeamWindow is an org-wide budget window of a team, from
// data.haltline.teams.<team>.<window> (e.g. teams.red.daily.max_cost_usd).
type TeamWindow struct {
	Team   string
	Name   string
	Period time.Duration
	Limits Limits
}

// Decision is one entry of the decision log. It never carries tool
// arguments, only their fingerprint.
type Decision struct {
	// Package is the Rego package asked, e.g. "haltline.tool".
	Package string
	RunID   string
	Tenant  string
	Team    string
	// Subject is the model name or the tool (server/name), if any.
	Subject string
	// Fingerprint is the tool arguments' fingerprint (or a hash of them).
	Fingerprint string
	// Verdict is "allow" or "deny" for the model and tool questions; empty
	// for answers (budgets, thresholds, termination modes) and errors.
	Verdict string
	// Summary is a short rendering of the answer, e.g. "allow level=L1",
	// or "error"; empty unless Options.DecisionSummaries is set.
	Summary string
	// Err is the evaluation error, if any; the caller refuses the call.
	Err error
	// Constant is true when the answer was known without evaluating,
	// because the loaded package gives the same answer for any input.
	Constant bool
	// Cached is true when the answer came from the set's cache: the same
	// package already answered the same values at every input path it
	// reads.
	Cached   bool
	Duration time.Duration
	// Version is the policy set version that answered.
	Version uint64
}
