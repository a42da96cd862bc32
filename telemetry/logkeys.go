package telemetry

// Log keys: every structured log line of the gateway uses these names, so
// that a query written at 3 a.m. works on every line. A new key is added
// here, never spelled inline.
//
// Secrets are never logged; prompts and tool arguments only as hashes
// (KeyArgsHash is a loop-guard fingerprint, never the arguments).
const (
	KeyRunID        = "run_id"
	KeySessionID    = "session_id"
	KeyTenant       = "tenant"
	KeyTeam         = "team"
	KeyAPI          = "api"
	KeyProvider     = "provider"
	KeyModel        = "model"
	KeyStatus       = "status"
	KeyState        = "state"
	KeyStep         = "step"
	KeyInputTokens  = "input_tokens"
	KeyOutputTokens = "output_tokens"
	KeyCostUSD      = "cost_usd"
	KeyDurationMs   = "duration_ms"
	KeyOverheadMs   = "overhead_ms"
	KeyUpstreamMs   = "upstream_ms"
	KeyFirstByteMs  = "first_byte_ms"
	KeyFinishReason = "finish_reason"
	KeyToolCalls    = "tool_calls"
	KeyWrapUp       = "wrap_up"
	KeyReason       = "reason"
	KeyDetail       = "detail"
	KeyDetector     = "detector"
	KeyMode         = "mode"
	KeyTool         = "tool"
	KeyArgsHash     = "args_hash"
	KeyPackage      = "package"
	KeySubject      = "subject"
	KeyDecision     = "decision"
	KeyDurationUs   = "duration_us"
	KeyPolicyVer    = "policy_version"
	KeyTraceID      = "trace_id"
	KeyError        = "err"
)

// Log messages of the lines an SRE searches for.
const (
	MsgModelCall      = "model call"
	MsgRunEnded       = "run ended"
	MsgPolicyDecision = "policy decision"
	MsgPolicyFailed   = "policy decision failed"
)
