package accounting

import (
	"math"

	"github.com/haltline/haltline/wire"
)

// Cost prices a call's normalised usage (docs/design.md §12). provider is
// wire.API.Provider(): "anthropic" or "openai" (anything else is priced as
// openai, whose formula is the general one).
//
//	openai:    (input − cached − cache_write)·input + cached·cached_input
//	           + cache_write·cache_write + (output − reasoning)·output
//	           + reasoning·reasoning
//	anthropic: (input − cached − cache_write)·input + cached·cached_input
//	           + cache_write·cache_write + output·output
//
// Cache writes are inside input_tokens for both providers once normalised,
// so they come out of the plain-input part and nothing is counted twice;
// without a cache-write price they cost the input price (Price.CacheWrite
// already holds that fallback). Anthropic bills thinking as output, so its
// reasoning count (if any) is not priced apart.
//
// Counts are clamped defensively: negatives count as zero, cached and
// cache-write cannot exceed the input they are part of, reasoning cannot
// exceed output. A provider bug must not produce a negative cost.
func (p Price) Cost(provider string, u wire.Usage) Money {
	in := max(u.InputTokens, 0)
	cached := min(max(u.CachedTokens, 0), in)
	write := min(max(u.CacheWriteTokens, 0), in-cached)
	plain := in - cached - write
	out := max(u.OutputTokens, 0)

	c := int64(mulSat(plain, p.Input))
	c = addSat(c, int64(mulSat(cached, p.CachedInput)))
	c = addSat(c, int64(mulSat(write, p.CacheWrite)))
	if provider == "anthropic" {
		c = addSat(c, int64(mulSat(out, p.Output)))
		return Money(c)
	}
	reasoning := min(max(u.ReasoningTokens, 0), out)
	c = addSat(c, int64(mulSat(out-reasoning, p.Output)))
	c = addSat(c, int64(mulSat(reasoning, p.Reasoning)))
	return Money(c)
}

// worstInput is the highest price an input token can cost: the input price,
// or the cache-write price when it is higher (Anthropic: 1.25×), because a
// call may write its whole prompt to the cache.
func (p Price) worstInput() Money { return max(p.Input, p.CacheWrite) }

// worstOutput is the highest price an output token can cost.
func (p Price) worstOutput() Money { return max(p.Output, p.Reasoning) }

// WorstCase is the most a call can cost before it is sent: every input
// token at the full input price (the cache-write price when that is higher,
// since a prompt may be written to the cache whole; cache reads only lower
// the bill) and every possible output token at max(output, reasoning).
// Reserving this makes "spent + reserved ≤ limit" hold even when the call
// uses all of its output allowance.
func (p Price) WorstCase(inputTokens, maxOutputTokens int64) Money {
	in := mulSat(inputTokens, p.worstInput())
	out := mulSat(maxOutputTokens, p.worstOutput())
	return Money(addSat(int64(in), int64(out)))
}

// MaxOutputFor returns the largest output cap whose worst case, with
// inputTokens of input, stays within budget: how far a wrap-up call may be
// allowed to write with what remains. 0 when even the input does not fit;
// math.MaxInt64 when output is free.
func (p Price) MaxOutputFor(budget Money, inputTokens int64) int64 {
	rem := budget - p.WorstCase(inputTokens, 0)
	if rem < 0 {
		return 0
	}
	per := p.worstOutput()
	if per <= 0 {
		return math.MaxInt64
	}
	return int64(rem / per)
}

// InputMarginPercent is how far above the token estimate a call's input
// is reserved. The estimate (contextmgr.Estimate, the same one the context
// watermark uses) comes within ±8% of the providers' counts on recorded
// calls and within -16%..+31% of o200k per content class (see contextmgr's
// doc); the margin covers most of its low side, so that the reservation
// rarely falls short of what the call is billed, without reserving far
// more than it uses: a reservation too high wraps a healthy run up early,
// one too low is only corrected at settlement, which may then take spent
// past a limit (and says so).
const InputMarginPercent = 10

// ReserveInput is the input tokens a call reserves for an estimate of
// est: est plus the margin, rounded up.
func ReserveInput(est int64) int64 {
	if est <= 0 {
		return 0
	}
	// est/100 first: no overflow, and the same rounding as est×p/100 up.
	return addSat(est, est/100*InputMarginPercent+(est%100*InputMarginPercent+99)/100)
}
