package policy

import (
	"fmt"
	"math"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Answers are decoded from AST values. A key that is absent or null keeps
// the Go-side default; a key of the wrong type is an error, because a
// policy that says something the gateway cannot read must not be guessed at.

func decodeAnswer(id questionID, v ast.Value) (any, error) {
	switch id {
	case qBudget:
		return decodeBudget(v)
	case qModel:
		return decodeModel(v)
	case qTool:
		return decodeTool(v)
	case qLoop:
		return decodeLoop(v)
	case qTermination:
		return decodeTermination(v)
	case qRecording:
		return decodeRecording(v)
	}
	return nil, fmt.Errorf("policy: unknown question %d", id)
}

type decoder struct {
	pkg string
	obj ast.Object
}

func newDecoder(pkg string, v ast.Value) (decoder, error) {
	if v == nil {
		return decoder{pkg: pkg}, nil
	}
	o, ok := v.(ast.Object)
	if !ok {
		return decoder{}, fmt.Errorf("policy: %s: want an object, got %s", pkg, ast.ValueName(v))
	}
	return decoder{pkg: pkg, obj: o}, nil
}

// get returns the value under key, nil when absent or null.
func (d decoder) get(key string) ast.Value {
	if d.obj == nil {
		return nil
	}
	t := d.obj.Get(ast.InternedTerm(key))
	if t == nil {
		return nil
	}
	if _, null := t.Value.(ast.Null); null {
		return nil
	}
	return t.Value
}

func (d decoder) errf(key, format string, a ...any) error {
	return fmt.Errorf("policy: %s: %s: "+format, append([]any{d.pkg, key}, a...)...)
}

func (d decoder) sub(key string) (decoder, bool, error) {
	v := d.get(key)
	if v == nil {
		return decoder{pkg: d.pkg + "." + key}, false, nil
	}
	o, ok := v.(ast.Object)
	if !ok {
		return decoder{}, false, d.errf(key, "want an object, got %s", ast.ValueName(v))
	}
	return decoder{pkg: d.pkg + "." + key, obj: o}, true, nil
}

func (d decoder) int64(key string, dst *int64) error {
	v := d.get(key)
	if v == nil {
		return nil
	}
	n, ok := v.(ast.Number)
	if !ok {
		return d.errf(key, "want a number, got %s", ast.ValueName(v))
	}
	if i, ok := n.Int64(); ok {
		if i < 0 {
			return d.errf(key, "want a number ≥ 0, got %d", i)
		}
		*dst = i
		return nil
	}
	f, ok := n.Float64()
	if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt64 {
		return d.errf(key, "want a whole number ≥ 0, got %s", n)
	}
	*dst = int64(f)
	return nil
}

func (d decoder) int(key string, dst *int) error {
	var i int64 = int64(*dst)
	if err := d.int64(key, &i); err != nil {
		return err
	}
	*dst = int(i)
	return nil
}

func (d decoder) float(key string, dst *float64) error {
	v := d.get(key)
	if v == nil {
		return nil
	}
	n, ok := v.(ast.Number)
	if !ok {
		return d.errf(key, "want a number, got %s", ast.ValueName(v))
	}
	f, ok := n.Float64()
	if !ok || f < 0 || math.IsInf(f, 0) {
		return d.errf(key, "want a number ≥ 0, got %s", n)
	}
	*dst = f
	return nil
}

func (d decoder) fraction(key string, dst *float64) error {
	if err := d.float(key, dst); err != nil {
		return err
	}
	if *dst > 1 {
		return d.errf(key, "want a fraction in [0, 1], got %v", *dst)
	}
	return nil
}

func (d decoder) bool(key string, dst *bool) error {
	v := d.get(key)
	if v == nil {
		return nil
	}
	b, ok := v.(ast.Boolean)
	if !ok {
		return d.errf(key, "want a boolean, got %s", ast.ValueName(v))
	}
	*dst = bool(b)
	return nil
}

func (d decoder) string(key string, dst *string, allowed ...string) error {
	v := d.get(key)
	if v == nil {
		return nil
	}
	s, ok := v.(ast.String)
	if !ok {
		return d.errf(key, "want a string, got %s", ast.ValueName(v))
	}
	if len(allowed) > 0 && !slices.Contains(allowed, string(s)) {
		return d.errf(key, "want one of %q, got %q", allowed, string(s))
	}
	*dst = string(s)
	return nil
}

// strings reads an array or a set of strings, sorted; present reports
// whether the key was there at all.
func (d decoder) strings(key string) (out []string, present bool, err error) {
	v := d.get(key)
	if v == nil {
		return nil, false, nil
	}
	add := func(t *ast.Term) error {
		s, ok := t.Value.(ast.String)
		if !ok {
			return d.errf(key, "want strings, got %s", ast.ValueName(t.Value))
		}
		out = append(out, string(s))
		return nil
	}
	switch c := v.(type) {
	case *ast.Array:
		out = make([]string, 0, c.Len())
		for i := range c.Len() {
			if err := add(c.Elem(i)); err != nil {
				return nil, true, err
			}
		}
	case ast.Set:
		out = make([]string, 0, c.Len())
		for _, t := range c.Slice() {
			if err := add(t); err != nil {
				return nil, true, err
			}
		}
	default:
		return nil, true, d.errf(key, "want an array or a set, got %s", ast.ValueName(v))
	}
	slices.Sort(out)
	return out, true, nil
}

// limitsInto overlays the budget-vector keys found in d onto l.
func (d decoder) limitsInto(l *Limits) error {
	for _, f := range []struct {
		key string
		dst *int64
	}{
		{"max_steps", &l.MaxSteps},
		{"deadline_ms", &l.DeadlineMs},
		{"max_tokens", &l.MaxTokens},
		{"max_input_tokens", &l.MaxInputTokens},
		{"max_output_tokens", &l.MaxOutputTokens},
		{"max_tool_calls", &l.MaxToolCalls},
		{"default_max_output_tokens", &l.DefaultMaxOutputTokens},
		{"min_output_tokens", &l.MinOutputTokens},
	} {
		// An explicit null means "no limit", not "the default".
		if d.obj != nil {
			if t := d.obj.Get(ast.InternedTerm(f.key)); t != nil {
				if _, null := t.Value.(ast.Null); null {
					*f.dst = 0
				}
			}
		}
		if err := d.int64(f.key, f.dst); err != nil {
			return err
		}
	}
	if err := d.float("max_cost_usd", &l.MaxCostUSD); err != nil {
		return err
	}
	q, ok, err := d.sub("tool_quotas")
	if err != nil {
		return err
	}
	if ok {
		l.ToolQuotas = make(map[string]int64, q.obj.Len())
		err := q.keys(func(name string) error {
			var n int64
			err := q.int64(name, &n)
			l.ToolQuotas[name] = n
			return err
		})
		if err != nil {
			return err
		}
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{
		{"soft_compress", &l.SoftCompress},
		{"soft_wrapup", &l.SoftWrapUp},
		{"final_reserve", &l.FinalReserve},
	} {
		if err := d.fraction(f.key, f.dst); err != nil {
			return err
		}
	}
	if err := d.string("summariser_model", &l.SummariserModel); err != nil {
		return err
	}
	if err := d.bool("parallel_side_effects", &l.ParallelSideEffects); err != nil {
		return err
	}
	if err := d.toolOutputInto(&l.ToolOutput); err != nil {
		return err
	}
	return d.string("paused_time", &l.PausedTime, PausedFlow, PausedFreeze)
}

// toolOutputInto reads limits.tool_output.
func (d decoder) toolOutputInto(o *ToolOutput) error {
	t, ok, err := d.sub("tool_output")
	if err != nil || !ok {
		return err
	}
	cut := !o.Whole
	if err := t.bool("cut", &cut); err != nil {
		return err
	}
	o.Whole = !cut
	rounds := -1
	if err := t.int("read_back", &rounds); err != nil {
		return err
	}
	switch {
	case rounds == 0:
		o.NoReadBack = true
	case rounds > 0:
		o.ReadBack = rounds
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"inline", &o.Inline}, {"head", &o.Head}, {"tail", &o.Tail}} {
		if err := t.int(f.key, f.dst); err != nil {
			return err
		}
		if *f.dst < 0 {
			return t.errf(f.key, "want a count of characters, not %d", *f.dst)
		}
	}
	tools, ok, err := t.sub("tools")
	if err != nil || !ok {
		return err
	}
	o.WholeTools = make(map[string]bool, tools.obj.Len())
	return tools.keys(func(name string) error {
		tool, _, err := tools.sub(name)
		cut := !o.Whole
		if err == nil {
			err = tool.bool("cut", &cut)
		}
		o.WholeTools[name] = !cut
		return err
	})
}

// keys calls fn with each key of the object, in order, until fn returns an
// error; a key that is not a string is an error.
func (d decoder) keys(fn func(key string) error) error {
	var err error
	d.obj.Foreach(func(k, _ *ast.Term) {
		if err != nil {
			return
		}
		key, isStr := k.Value.(ast.String)
		if !isStr {
			err = d.errf(k.String(), "want a string key")
			return
		}
		err = fn(string(key))
	})
	return err
}

func decodeBudget(v ast.Value) (Limits, error) {
	l := DefaultLimits()
	d, err := newDecoder(packages[qBudget], v)
	if err != nil {
		return Limits{}, err
	}
	lim, _, err := d.sub("limits")
	if err != nil {
		return Limits{}, err
	}
	if err := lim.limitsInto(&l); err != nil {
		return Limits{}, err
	}
	return l, nil
}

func decodeModel(v ast.Value) (ModelDecision, error) {
	var m ModelDecision
	d, err := newDecoder(packages[qModel], v)
	if err != nil {
		return m, err
	}
	deny, _, err := d.strings("deny")
	if err != nil {
		return ModelDecision{}, err
	}
	if len(deny) > 0 {
		m.Deny = deny
	}
	if err := d.int64("max_output_tokens", &m.MaxOutputTokens); err != nil {
		return ModelDecision{}, err
	}
	allowed, present, err := d.strings("allowed")
	if err != nil {
		return ModelDecision{}, err
	}
	if present {
		m.Allowed = allowed
	}
	return m, nil
}

// defaultToolDecision is the answer when haltline.tool leaves decision
// undefined: the policy default for a tool nobody declared (docs/design.md §6).
func defaultToolDecision() ToolDecision {
	return ToolDecision{Allow: true, Level: LevelReversible}
}

func decodeTool(v ast.Value) (ToolDecision, error) {
	t := defaultToolDecision()
	d, err := newDecoder(packages[qTool], v)
	if err != nil {
		return ToolDecision{}, err
	}
	dec, _, err := d.sub("decision")
	if err != nil {
		return ToolDecision{}, err
	}
	if err := dec.bool("allow", &t.Allow); err != nil {
		return ToolDecision{}, err
	}
	if err := dec.string("level", &t.Level, LevelReadOnly, LevelReversible, LevelIrreversible); err != nil {
		return ToolDecision{}, err
	}
	// Without an explicit answer an allowed L2 action goes through a human
	// (docs/design.md §6); a policy may still say otherwise, e.g. in a sandbox.
	t.Approval = t.Allow && t.Level == LevelIrreversible
	if err := dec.bool("approval", &t.Approval); err != nil {
		return ToolDecision{}, err
	}
	if err := dec.string("reason", &t.Reason); err != nil {
		return ToolDecision{}, err
	}
	return t, nil
}

func decodeLoop(v ast.Value) (LoopThresholds, error) {
	l := DefaultLoopThresholds()
	d, err := newDecoder(packages[qLoop], v)
	if err != nil {
		return LoopThresholds{}, err
	}
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"same_in_row", &l.SameInRow},
		{"window", &l.Window},
		{"window_repeats", &l.WindowRepeats},
		{"max_cycle_period", &l.MaxCyclePeriod},
		{"stall_steps", &l.StallSteps},
		{"semantic_repeats", &l.SemanticRepeats},
		{"semantic_window", &l.SemanticWindow},
	} {
		if err := d.int(f.key, f.dst); err != nil {
			return LoopThresholds{}, err
		}
	}
	if err := d.fraction("semantic_similarity", &l.SemanticSimilarity); err != nil {
		return LoopThresholds{}, err
	}
	keys, present, err := d.strings("volatile_keys")
	if err != nil {
		return LoopThresholds{}, err
	}
	if present {
		l.VolatileKeys = keys
	}
	return l, nil
}

func decodeTermination(v ast.Value) (TerminationAnswer, error) {
	a := TerminationAnswer{Mode: ModeFinalize}
	d, err := newDecoder(packages[qTermination], v)
	if err != nil {
		return a, err
	}
	if err := d.string("mode", &a.Mode, ModeFinalize, ModeReject); err != nil {
		return TerminationAnswer{}, err
	}
	e, ok, err := d.sub("enforcement")
	if err != nil || !ok {
		return a, err
	}
	err = e.keys(func(line string) error {
		var mode string
		if err := e.string(line, &mode, Enforce, Shadow); err != nil || mode == "" {
			return err
		}
		if a.Enforcement == nil {
			a.Enforcement = map[string]string{}
		}
		a.Enforcement[line] = mode
		return nil
	})
	if err != nil {
		return TerminationAnswer{}, err
	}
	return a, nil
}
