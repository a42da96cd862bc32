package policy

import (
	"encoding/json"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// Inputs are built as AST values directly: the JSON round trip OPA does for
// a Go struct input (marshal, unmarshal, convert) costs several times more
// on the per-call path.

// Key terms are shared by every input; OPA never mutates input terms.
var (
	kPrincipal     = ast.StringTerm("principal")
	kRun           = ast.StringTerm("run")
	kHeaders       = ast.StringTerm("headers")
	kModel         = ast.StringTerm("model")
	kTool          = ast.StringTerm("tool")
	kTenant        = ast.StringTerm("tenant")
	kTeam          = ast.StringTerm("team")
	kUser          = ast.StringTerm("user")
	kKeyID         = ast.StringTerm("key_id")
	kID            = ast.StringTerm("id")
	kSessionID     = ast.StringTerm("session_id")
	kParentID      = ast.StringTerm("parent_id")
	kAgentID       = ast.StringTerm("agent_id")
	kTaskType      = ast.StringTerm("task_type")
	kState         = ast.StringTerm("state")
	kExpectedSteps = ast.StringTerm("expected_steps")
	kSteps         = ast.StringTerm("steps")
	kModelCalls    = ast.StringTerm("model_calls")
	kToolCalls     = ast.StringTerm("tool_calls")
	kInputTokens   = ast.StringTerm("input_tokens")
	kOutputTokens  = ast.StringTerm("output_tokens")
	kElapsedMs     = ast.StringTerm("elapsed_ms")
	kCostUSD       = ast.StringTerm("cost_usd")
	kName          = ast.StringTerm("name")
	kProvider      = ast.StringTerm("provider")
	kStream        = ast.StringTerm("stream")
	kMaxOutput     = ast.StringTerm("max_output_tokens")
	kServer        = ast.StringTerm("server")
	kLevel         = ast.StringTerm("level")
	kHints         = ast.StringTerm("hints")
	kArguments     = ast.StringTerm("arguments")
	kFingerprint   = ast.StringTerm("fingerprint")
)

func str(s string) *ast.Term { return ast.InternedTerm(s) }

func num(n int64) *ast.Term { return ast.InternedTerm(n) }

func principalTerm(p Principal) *ast.Term {
	return ast.ObjectTerm(
		[2]*ast.Term{kTenant, str(p.Tenant)},
		[2]*ast.Term{kTeam, str(p.Team)},
		[2]*ast.Term{kUser, str(p.User)},
		[2]*ast.Term{kKeyID, str(p.KeyID)},
	)
}

func runTerm(r RunInfo) *ast.Term {
	return ast.ObjectTerm(
		[2]*ast.Term{kID, str(r.ID)},
		[2]*ast.Term{kSessionID, str(r.SessionID)},
		[2]*ast.Term{kParentID, str(r.ParentID)},
		[2]*ast.Term{kAgentID, str(r.AgentID)},
		[2]*ast.Term{kTaskType, str(r.TaskType)},
		[2]*ast.Term{kState, str(r.State)},
		[2]*ast.Term{kExpectedSteps, num(r.ExpectedSteps)},
		[2]*ast.Term{kSteps, num(r.Steps)},
		[2]*ast.Term{kModelCalls, num(r.ModelCalls)},
		[2]*ast.Term{kToolCalls, num(r.ToolCalls)},
		[2]*ast.Term{kInputTokens, num(r.InputTokens)},
		[2]*ast.Term{kOutputTokens, num(r.OutputTokens)},
		[2]*ast.Term{kElapsedMs, num(r.ElapsedMs)},
		[2]*ast.Term{kCostUSD, ast.FloatNumberTerm(r.CostUSD)},
	)
}

func headersTerm(h map[string]string) *ast.Term {
	items := make([][2]*ast.Term, 0, len(h))
	for k, v := range h {
		items = append(items, [2]*ast.Term{ast.StringTerm(k), ast.StringTerm(v)})
	}
	return ast.ObjectTerm(items...)
}

// runItems are the items every input has; headers only when some rule
// reads them.
func runItems(in RunInput, s *set, extra int) [][2]*ast.Term {
	items := make([][2]*ast.Term, 0, 3+extra)
	items = append(items,
		[2]*ast.Term{kPrincipal, principalTerm(in.Principal)},
		[2]*ast.Term{kRun, runTerm(in.Run)},
	)
	if s.needsHeaders && len(in.Headers) > 0 {
		items = append(items, [2]*ast.Term{kHeaders, headersTerm(in.Headers)})
	}
	return items
}

func runValue(in RunInput, s *set) ast.Value {
	return ast.NewObject(runItems(in, s, 0)...)
}

func modelValue(in ModelInput, s *set) ast.Value {
	items := runItems(in.RunInput, s, 1)
	m := ast.ObjectTerm(
		[2]*ast.Term{kName, str(in.Model.Name)},
		[2]*ast.Term{kProvider, str(in.Model.Provider)},
		[2]*ast.Term{kStream, ast.InternedTerm(in.Model.Stream)},
		[2]*ast.Term{kMaxOutput, num(in.Model.MaxOutputTokens)},
	)
	return ast.NewObject(append(items, [2]*ast.Term{kModel, m})...)
}

func toolValue(in ToolInput, s *set) ast.Value {
	items := runItems(in.RunInput, s, 1)
	t := in.Tool
	ti := make([][2]*ast.Term, 0, 6)
	ti = append(ti,
		[2]*ast.Term{kName, str(t.Name)},
		[2]*ast.Term{kServer, str(t.Server)},
		[2]*ast.Term{kLevel, str(t.Level)},
		[2]*ast.Term{kFingerprint, str(t.Fingerprint)},
	)
	if len(t.Hints) > 0 {
		hi := make([][2]*ast.Term, 0, len(t.Hints))
		for k, v := range t.Hints {
			hi = append(hi, [2]*ast.Term{ast.StringTerm(k), ast.InternedTerm(v)})
		}
		ti = append(ti, [2]*ast.Term{kHints, ast.ObjectTerm(hi...)})
	}
	if s.needsArgs && len(t.Arguments) > 0 {
		ti = append(ti, [2]*ast.Term{kArguments, argumentsTerm(t.Arguments)})
	}
	return ast.NewObject(append(items, [2]*ast.Term{kTool, ast.ObjectTerm(ti...)})...)
}

// argumentsTerm converts the tool arguments. Models do emit broken JSON; a
// policy then sees the raw text as a string rather than nothing.
func argumentsTerm(raw json.RawMessage) *ast.Term {
	var v any
	if err := util.UnmarshalJSON(raw, &v); err != nil {
		return ast.StringTerm(string(raw))
	}
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		return ast.StringTerm(string(raw))
	}
	return ast.NewTerm(val)
}
