package accounting

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Budget is a run's budget vector plus its deadline, as policy grants it
// (haltline.budget `limits`) or as X-Run-Budget asks for it. 0 means
// unlimited in that dimension.
type Budget struct {
	Vector
	DeadlineMs int64
}

// Budget keys, shared by X-Run-Budget and the Rego `limits` object.
const (
	KeyMaxSteps        = "max_steps"
	KeyDeadlineMs      = "deadline_ms"
	KeyMaxTokens       = "max_tokens"
	KeyMaxInputTokens  = "max_input_tokens"
	KeyMaxOutputTokens = "max_output_tokens"
	KeyMaxToolCalls    = "max_tool_calls"
	KeyMaxCostUSD      = "max_cost_usd"
)

// ParseBudgetHeader parses X-Run-Budget:
//
//	max_steps=20,deadline_ms=60000,max_tokens=50000,max_cost_usd=0.5
//
// with max_input_tokens, max_output_tokens and max_tool_calls as well.
// Spaces around items are allowed. Every problem is reported at once, each
// naming its key: unknown keys, repeated keys, values that are not positive
// whole numbers (max_cost_usd: a positive decimal, read exactly). Zero is
// refused because 0 means unlimited: a header that says max_steps=0 cannot
// mean that. An empty header is the empty budget.
func ParseBudgetHeader(s string) (Budget, error) {
	var b Budget
	var errs []error
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok {
			errs = append(errs, fmt.Errorf("X-Run-Budget: %q is not key=value", item))
			continue
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("X-Run-Budget: %s given twice", key))
			continue
		}
		seen[key] = true

		if key == KeyMaxCostUSD {
			m, err := parseDecimal(val, usdDecimals)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("X-Run-Budget: %s=%q: %v", key, val, err))
			case m <= 0:
				errs = append(errs, fmt.Errorf("X-Run-Budget: %s=%q: must be positive", key, val))
			default:
				b.Cost = Money(m)
			}
			continue
		}
		var dst *int64
		switch key {
		case KeyMaxSteps:
			dst = &b.Steps
		case KeyDeadlineMs:
			dst = &b.DeadlineMs
		case KeyMaxTokens:
			dst = &b.Tokens
		case KeyMaxInputTokens:
			dst = &b.InputTokens
		case KeyMaxOutputTokens:
			dst = &b.OutputTokens
		case KeyMaxToolCalls:
			dst = &b.ToolCalls
		default:
			errs = append(errs, fmt.Errorf("X-Run-Budget: unknown key %q", key))
			continue
		}
		n, err := strconv.ParseInt(val, 10, 64)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("X-Run-Budget: %s=%q is not a whole number", key, val))
		case n <= 0:
			errs = append(errs, fmt.Errorf("X-Run-Budget: %s=%q: must be positive", key, val))
		default:
			*dst = n
		}
	}
	if len(errs) > 0 {
		return Budget{}, errors.Join(errs...)
	}
	return b, nil
}

// Tighten returns, per dimension, the smaller non-zero of b and o (0 being
// unlimited): b.Tighten(header) never grants more than b, which is how a
// header may tighten what policy grants and never loosen it.
func (b Budget) Tighten(o Budget) Budget {
	t := func(x, y int64) int64 {
		switch {
		case x == 0:
			return y
		case y == 0:
			return x
		}
		return min(x, y)
	}
	return Budget{
		Vector: Vector{
			Steps:        t(b.Steps, o.Steps),
			Tokens:       t(b.Tokens, o.Tokens),
			InputTokens:  t(b.InputTokens, o.InputTokens),
			OutputTokens: t(b.OutputTokens, o.OutputTokens),
			ToolCalls:    t(b.ToolCalls, o.ToolCalls),
			Cost:         Money(t(int64(b.Cost), int64(o.Cost))),
		},
		DeadlineMs: t(b.DeadlineMs, o.DeadlineMs),
	}
}
