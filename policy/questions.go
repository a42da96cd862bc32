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
// package cannot depend on input, else its cached answer for the same
// values at the input paths the package reads, else evaluate, decode and
// cache; copy what the caller could mutate of a shared answer; log the
// decision; an error is returned, never an allow.

// Budget returns the budget vector and soft lines of a run; asked once when
// the run starts. X-Run-Budget tightening is the caller's.
func (e *Engine) Budget(ctx context.Context, in RunInput) (Limits, error) {
	s, start := e.begin()
	l, o, err := ask(ctx, s, qBudget, &in, nil, nil, func() (Limits, error) {
		v, err := s.evalFresh(ctx, qBudget, runValue(in, s))
		if err != nil {
			return Limits{}, err
		}
		return decodeBudget(v)
	})
	if err == nil && o.shared() && l.ToolQuotas != nil {
		l.ToolQuotas = cloneMap(l.ToolQuotas)
	}
	if err == nil && o.shared() && l.ToolOutput.WholeTools != nil {
		l.ToolOutput.WholeTools = cloneMap(l.ToolOutput.WholeTools)
	}
	if e.opts.DecisionLog != nil {
		e.logDecisionFrom(s, start, qBudget, in, "", "", "", o, err, func() string {
			return fmt.Sprintf("max_steps=%d deadline_ms=%d max_tokens=%d max_cost_usd=%g", l.MaxSteps, l.DeadlineMs, l.MaxTokens, l.MaxCostUSD)
		})
	}
	return l, err
}

// Model decides whether a model call may go and caps its output; asked
// before every model call.
func (e *Engine) Model(ctx context.Context, in ModelInput) (ModelDecision, error) {
	s, start := e.begin()
	d, o, err := ask(ctx, s, qModel, &in.RunInput, &in.Model, nil, func() (ModelDecision, error) {
		v, err := s.evalFresh(ctx, qModel, modelValue(in, s))
		if err != nil {
			return ModelDecision{}, err
		}
		return decodeModel(v)
	})
	if err == nil && o.shared() {
		d.Deny, d.Allowed = slices.Clone(d.Deny), slices.Clone(d.Allowed)
	}
	if e.opts.DecisionLog != nil {
		e.logDecisionFrom(s, start, qModel, in.RunInput, in.Model.Name, "", verdict(len(d.Deny) == 0), o, err, func() string {
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
	d, o, err := ask(ctx, s, qTool, &in.RunInput, nil, &in.Tool, func() (ToolDecision, error) {
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
		e.logDecisionFrom(s, start, qTool, in.RunInput, subject, argsFingerprint(in.Tool), verdict(d.Allow), o, err, func() string {
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
	t, o, err := ask(ctx, s, qLoop, &in, nil, nil, func() (LoopThresholds, error) {
		v, err := s.evalFresh(ctx, qLoop, runValue(in, s))
		if err != nil {
			return LoopThresholds{}, err
		}
		return decodeLoop(v)
	})
	if err == nil && o.shared() {
		t.VolatileKeys = slices.Clone(t.VolatileKeys)
	}
	if e.opts.DecisionLog != nil {
		e.logDecisionFrom(s, start, qLoop, in, "", "", "", o, err, func() string {
			return fmt.Sprintf("same_in_row=%d window=%d/%d cycle=%d stall=%d semantic=%d/%d@%g", t.SameInRow, t.Window, t.WindowRepeats, t.MaxCyclePeriod, t.StallSteps, t.SemanticRepeats, t.SemanticWindow, t.SemanticSimilarity)
		})
	}
	return t, err
}

// Termination says how a run that must end ends, and which lines only
// observe (shadow); asked when a run must end.
func (e *Engine) Termination(ctx context.Context, in RunInput) (TerminationAnswer, error) {
	s, start := e.begin()
	a, o, err := ask(ctx, s, qTermination, &in, nil, nil, func() (TerminationAnswer, error) {
		v, err := s.evalFresh(ctx, qTermination, runValue(in, s))
		if err != nil {
			return TerminationAnswer{}, err
		}
		return decodeTermination(v)
	})
	if err == nil && o.shared() && a.Enforcement != nil {
		a.Enforcement = cloneMap(a.Enforcement)
	}
	if e.opts.DecisionLog != nil {
		e.logDecisionFrom(s, start, qTermination, in, "", "", "", o, err, func() string {
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

// origin says where an answer came from.
type origin uint8

const (
	evaluated origin = iota // evaluated for this call, not kept
	stored                  // evaluated and now also held by the cache
	constant                // the folded answer of an input-independent package
	cached                  // from the cache
)

// shared reports whether the answer's maps and slices are also held by the
// set, so the caller must get copies.
func (o origin) shared() bool { return o != evaluated }

// ask returns the constant answer when there is one, else a cached one for
// the same values at the input paths the package reads, else evaluates and
// caches the result. in, m and t are the question's input (m and t nil when
// it has no model or tool; in nil skips the cache). A failed evaluation
// yields the zero value (Allow false) and the error, and is never cached.
func ask[T any](ctx context.Context, s *set, id questionID, in *RunInput, m *ModelInfo, t *ToolInfo, eval func() (T, error)) (T, origin, error) {
	q := s.questions[id]
	if q.constant {
		if a, ok := q.answer.(T); ok {
			return a, constant, nil
		}
	}
	mc := s.memo
	var buf [128]byte
	var key []byte
	if q.memoised && in != nil {
		// One memo serves every question of the set: the key starts with
		// the question.
		key = appendKey(append(buf[:0], byte(id)), q.key, s, in, m, t)
		if len(key) > maxKeyLen {
			mc = nil
		} else if v, ok := mc.get(key); ok {
			if a, ok := v.(T); ok {
				return a, cached, nil
			}
		}
	} else {
		mc = nil
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, evaluated, err
	}
	a, err := eval()
	if err != nil {
		var zero T
		return zero, evaluated, err
	}
	if mc != nil {
		mc.put(key, a)
		return a, stored, nil
	}
	return a, evaluated, nil
}

// verdict is a model or tool decision's Verdict.
func verdict(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

// logDecisionFrom hands the decision to the log. The summary is rendered
// only when asked for (Options.DecisionSummaries): a Sprintf per question,
// several a call, for a debug line that is off by default.
func (e *Engine) logDecisionFrom(s *set, start time.Time, id questionID, in RunInput, subject, fp, verdict string, o origin, err error, summary func() string) {
	d := Decision{
		Package:     packages[id],
		RunID:       in.Run.ID,
		Tenant:      in.Principal.Tenant,
		Team:        in.Principal.Team,
		Subject:     subject,
		Fingerprint: fp,
		Verdict:     verdict,
		Err:         err,
		Constant:    o == constant,
		Cached:      o == cached,
		Duration:    time.Since(start),
		Version:     s.version,
	}
	switch {
	case err != nil:
		d.Summary, d.Verdict = "error", ""
	case e.opts.DecisionSummaries:
		d.Summary = summary()
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
