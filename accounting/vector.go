package accounting

import (
	"math"

	"github.com/haltline/haltline/wire"
)

// Vector is an amount in every budget dimension at once: what a call wants,
// what a ledger has spent, or, as a limit, what it may spend. In a limit, 0
// means unlimited in that dimension.
type Vector struct {
	Steps        int64 `json:"steps,omitempty"`
	Tokens       int64 `json:"tokens,omitempty"`
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	ToolCalls    int64 `json:"tool_calls,omitempty"`
	Cost         Money `json:"cost_pusd,omitempty"` // pico-USD
}

// Dimension names, as Shortfall.Dimension reports them.
const (
	DimSteps        = "steps"
	DimTokens       = "tokens"
	DimInputTokens  = "input_tokens"
	DimOutputTokens = "output_tokens"
	DimToolCalls    = "tool_calls"
	DimCost         = "cost"
)

// nDims is the number of dimensions; vec is Vector as an array so the
// ledger code loops instead of repeating itself six times.
const nDims = 6

type vec [nDims]int64

var dimNames = [nDims]string{DimSteps, DimTokens, DimInputTokens, DimOutputTokens, DimToolCalls, DimCost}

func (v Vector) vec() vec {
	return vec{v.Steps, v.Tokens, v.InputTokens, v.OutputTokens, v.ToolCalls, int64(v.Cost)}
}

func (a vec) vector() Vector {
	return Vector{Steps: a[0], Tokens: a[1], InputTokens: a[2], OutputTokens: a[3], ToolCalls: a[4], Cost: Money(a[5])}
}

// nonNeg returns v with negative dimensions set to zero: a negative want or
// actual would hand budget back that was never taken.
func (a vec) nonNeg() vec {
	for i := range a {
		a[i] = max(a[i], 0)
	}
	return a
}

// IsZero reports whether every dimension is zero.
func (v Vector) IsZero() bool { return v == Vector{} }

// Add returns the sum of two vectors, saturating.
func (v Vector) Add(o Vector) Vector {
	a, b := v.vec(), o.vec()
	for i := range a {
		a[i] = addSat(a[i], b[i])
	}
	return a.vector()
}

// Min returns the least of two vectors in each dimension.
func (v Vector) Min(o Vector) Vector {
	a, b := v.vec(), o.vec()
	for i := range a {
		a[i] = min(a[i], b[i])
	}
	return a.vector()
}

// UsageVector is a call's actual usage as a Vector, for Settle: tokens from
// the normalised usage and the cost priced from it. Steps and ToolCalls are
// the caller's to set: whether a model call counts as an agent step, and
// how many tool calls it asked for, are run-state decisions.
func UsageVector(u wire.Usage, cost Money) Vector {
	in, out := max(u.InputTokens, 0), max(u.OutputTokens, 0)
	return Vector{
		Tokens:       addSat(in, out),
		InputTokens:  in,
		OutputTokens: out,
		Cost:         max(cost, 0),
	}
}

// unlimited marks an unlimited dimension in a headroom.
const unlimited = math.MaxInt64
