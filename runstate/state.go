package runstate

// State is a run's place in the state machine of docs/design.md §4.
type State string

const (
	Ready                    State = "ready"
	Deciding                 State = "deciding"        // a model call is in flight
	ExecutingTools           State = "executing_tools" // tool calls are outstanding
	Paused                   State = "paused"          // waiting for an approval
	Completed                State = "completed"
	CompletedWithDegradation State = "completed_with_degradation"
	Terminated               State = "terminated"
	Failed                   State = "failed"
	Cancelled                State = "cancelled"
)

// Final reports whether no call may move the run any more.
func (s State) Final() bool {
	switch s {
	case Completed, CompletedWithDegradation, Terminated, Failed, Cancelled:
		return true
	}
	return false
}

// Termination reasons (docs/design.md §5).
const (
	ReasonCompleted      = "completed"
	ReasonMaxSteps       = "max_steps"
	ReasonDeadline       = "deadline"
	ReasonTokenBudget    = "token_budget"
	ReasonCostBudget     = "cost_budget"
	ReasonToolQuota      = "tool_quota"
	ReasonLoopDetected   = "loop_detected"
	ReasonStalled        = "stalled"
	ReasonPolicyDenied   = "policy_denied"
	ReasonApprovalDenied = "approval_denied"
	ReasonToolError      = "tool_error"
	ReasonModelError     = "model_error"
	ReasonCancelled      = "cancelled"
)

// Recoverable reports whether a run ended for reason may be resumed with
// more budget: the lines that more budget or time would lift.
func Recoverable(reason string) bool {
	switch reason {
	case ReasonMaxSteps, ReasonDeadline, ReasonTokenBudget, ReasonCostBudget,
		ReasonToolQuota, ReasonLoopDetected, ReasonStalled, ReasonCancelled:
		return true
	}
	return false
}
