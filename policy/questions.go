package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Each question follows the same steps: take the current set once (so one
// answer never mixes two versions), use its constant answer when the
// package cannot depend on input, else evaluate and decode; log the
// decision; an error is returned, never an allow.

// Budget returns the budget vector and soft lines of a run; asked once when
// the run starts. X-Run-Budget tightening is the caller's.
func (e *Engine) Budget(ctx context.Context, in RunInput) (Limits, error) {
	s, start := e.begin()
	l, constant, err := answer(ctx, s, qBudget, func() (Limits, error) {
		v, err := s.evalFresh(ctx, qBudget, runValue(in, s))
		if err != nil {
			return Limits{}, err
		}
		return decodeBudget(v)
	})
	if err == nil && constant && l.ToolQuotas != nil {
		l.ToolQuotas = cloneMap(l.ToolQuotas)
	}
	if e.opts.DecisionLog != nil {
		e.logDecision(s, start, qBudget, in, "", "", constant, err, func() string {
			return fmt.Sprintf("max_steps=%d deadline_ms=%d max_tokens=%d max_cost_usd=%g", l.MaxSteps, l.DeadlineMs, l.MaxTokens, l.MaxCostUSD)
		})
	}
	return l, err
}

// Model decides whether a model call may go and caps its output; asked
// before every model call.
func (e *Engine) Model(ctx context.Context, in ModelInput) (ModelDecision, error) {
	s, start := e.begin()
	d, constant, err := answer(ctx, s, qModel, func() (ModelDecision, error) {
		v, err := s.evalFresh(ctx, qModel, modelValue(in, s))
		if err != nil {
			return ModelDecision{}, err
		}
		return decodeModel(v)
	})
	if err == nil && constant {
		d.Deny, d.Allowed = slices.Clone(d.Deny), slices.Clone(d.Allowed)
	}
	if e.opts.DecisionLog != nil {
		e.logDecision(s, start, qModel, in.RunInput, in.Model.Name, "", constant, err, func() string {
			if len(d.Deny) > 0 {
				return "deny: " + strings.Join(d.Deny, "; ")
			}
			return fmt.Sprintf("allow max_output_tokens=%d", d.MaxOutputTokens)
		})
	}
	return d, err
}

// Tool decides a tool call: allowed, needs approval, its level; asked
// before every tool call.
func (e *Engine) Tool(ctx context.Context, in ToolInput) (ToolDecision, error) {
	s, start := e.begin()
	d, constant, err := answer(ctx, s, qTool, func() (ToolDecision, error) {
		v, err := s.evalFresh(ctx, qTool, toolValue(in, s))
		if err != nil {
			return ToolDecision{}, err
		}
		return decodeTool(v)
	})
	if e.opts.DecisionLog != nil {
		subject := in.Tool.Name
		if in.Tool.Server != "" {
			subject = in.Tool.Server + "/" + in.Tool.Name
		}
		e.logDecision(s, start, qTool, in.RunInput, subject, argsFingerprint(in.Tool), constant, err, func() string {
			verdict := "deny"
			if d.Allow {
				verdict = "allow"
			}
			return fmt.Sprintf("%s approval=%t level=%s reason=%q", verdict, d.Approval, d.Level, d.Reason)
		})
	}
	return d, err
}

// Loop returns the loop and stall detector thresholds of a run; asked once
// when the run starts.
func (e *Engine) Loop(ctx context.Context, in RunInput) (LoopThresholds, error) {
	s, start := e.begin()
	t, constant, err := answer(ctx, s, qLoop, func() (LoopThresholds, error) {
		v, err := s.evalFresh(ctx, qLoop, runValue(in, s))
		if err != nil {
			return LoopThresholds{}, err
		}
		return decodeLoop(v)
	})
	if err == nil && constant {
		t.VolatileKeys = slices.Clone(t.VolatileKeys)
	}
	if e.opts.DecisionLog != nil {
		e.logDecision(s, start, qLoop, in, "", "", constant, err, func() string {
			return fmt.Sprintf("same_in_row=%d window=%d/%d cycle=%d stall=%d", t.SameInRow, t.Window, t.WindowRepeats, t.MaxCyclePeriod, t.StallSteps)
		})
	}
	return t, err
}

// Termination says how a run that must end ends, and which lines only
// observe (shadow); asked when a run must end.
func (e *Engine) Termination(ctx context.Context, in RunInput) (TerminationAnswer, error) {
	s, start := e.begin()
	a, constant, err := answer(ctx, s, qTermination, func() (TerminationAnswer, error) {
		v, err := s.evalFresh(ctx, qTermination, runValue(in, s))
		if err != nil {
			return TerminationAnswer{}, err
		}
		return decodeTermination(v)
	})
	if err == nil && constant && a.Enforcement != nil {
		a.Enforcement = cloneMap(a.Enforcement)
	}
	if e.opts.DecisionLog != nil {
		e.logDecision(s, start, qTermination, in, "", "", constant, err, func() string {
			return fmt.Sprintf("mode=%s enforcement=%v", a.Mode, a.Enforcement)
		})
	}
	return a, err
}

func (e *Engine) begin() (*set, time.Time) {
	s := e.cur.Load()
	if e.opts.DecisionLog == nil {
		return s, time.Time{}
	}
	return s, time.Now()
}

// answer returns the constant answer when there is one, else evaluates.
// A failed evaluation yields the zero value (Allow false) and the error.
func answer[T any](ctx context.Context, s *set, id questionID, eval func() (T, error)) (T, bool, error) {
	if q := s.questions[id]; q.constant {
		if a, ok := q.answer.(T); ok {
			return a, true, nil
		}
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, false, err
	}
	a, err := eval()
	if err != nil {
		var zero T
		return zero, false, err
	}
	return a, false, nil
}

func (e *Engine) logDecision(s *set, start time.Time, id questionID, in RunInput, subject, fp string, constant bool, err error, summary func() string) {
	d := Decision{
		Package:     packages[id],
		RunID:       in.Run.ID,
		Tenant:      in.Principal.Tenant,
		Team:        in.Principal.Team,
		Subject:     subject,
		Fingerprint: fp,
		Err:         err,
		Constant:    constant,
		Duration:    time.Since(start),
		Version:     s.version,
	}
	if err == nil {
		d.Summary = summary()
	} else {
		d.Summary = "error"
	}
	e.opts.DecisionLog(d)
}

// argsFingerprint is what the decision log keeps of tool arguments: the
// caller's fingerprint, or a hash when it has none. Raw arguments may hold
// secrets or personal data and never reach the log.
func argsFingerprint(t ToolInfo) string {
	if t.Fingerprint != "" {
		return t.Fingerprint
	}
	if len(t.Arguments) == 0 {
		return ""
	}
	sum := sha256.Sum256(t.Arguments)
	return "sha256:" + hex.EncodeToString(sum[:16])
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
