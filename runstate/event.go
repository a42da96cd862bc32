package runstate

// Event types.
const (
	EventTransition = "transition"
	EventModelCall  = "model_call"
	EventToolCall   = "tool_call"
	// EventToolWithheld is a tool call the model asked for and the gateway
	// did not deliver: the run ended on that answer.
	EventToolWithheld = "tool_withheld"
	EventTermination  = "termination"
	EventShadow       = "shadow"
	EventResumed      = "resumed"
	EventWrapUp       = "wrap_up"
	EventOutputCapped = "output_capped"
	EventCompression  = "compression"
	// EventToolOutputCut names a tool output cut for the first time in a
	// run's forwarded requests: the tool, the sizes, the handle.
	EventToolOutputCut = "tool_output_cut"
	EventSummary       = "summary_call"
	// EventReadBack is a tool call of a model's answer that the gateway
	// answered itself: a read of a cut output, or an agent's tool not run
	// in the same answer. The agent never receives it.
	EventReadBack = "read_back"
)

// Event is one entry of a run's timeline. ElapsedMs is monotonic from the
// run's first call; At is wall time for people. Step is the agent step the
// event belongs to: a model call's is the step it takes, as its answer's
// X-Run-Step says; an event recorded without one carries the steps taken
// when it happened.
type Event struct {
	Seq       int64  `json:"seq"`
	At        string `json:"at"`
	ElapsedMs int64  `json:"elapsed_ms"`
	Type      string `json:"type"`
	From      State  `json:"from,omitempty"`
	To        State  `json:"to,omitempty"`
	Step      int64  `json:"step"`
	Detail    string `json:"detail,omitempty"`
	// Error is the termination reason's name of what failed the step,
	// when one did (model_error: a model call's stream was cut or carried
	// the provider's error event); Detail then says what.
	Error string `json:"error,omitempty"`
	// Model call facts.
	Model        string  `json:"model,omitempty"`
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
	Status       int     `json:"status,omitempty"`
	// Tool call facts (arguments only as a hash).
	Tool          string `json:"tool,omitempty"`
	ArgumentsHash string `json:"arguments_hash,omitempty"`
}
