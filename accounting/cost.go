package accounting

import (
	"math"

	"github.com/haltline/haltline/wire"
)

// Cost prices a call's normalised usage (DESIGN §12). provider is
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

// Input-size estimate, before the request is tokenized by the provider.
//
// The ratio is 3 bytes of JSON body per token, rounded up, plus a fixed
// 512 tokens per call. It was chosen against recorded traffic:
//
//   - OpenAI chat, 13,021-byte body, 4,020 prompt tokens: 3.24 bytes/token
//     (number-dense text; estimate 4,853).
//   - Anthropic with one tool, 778-byte body, 423 input tokens: 1.84
//     bytes/token, because Anthropic adds a hidden tool-use system prompt of
//     about 350 tokens; the same run's next call, 1,988 bytes, 771 tokens
//     (estimate 1,175). Per added byte it is 3.5 bytes/token.
//
// English prose tokenizes at about 4 bytes/token and JSON structure, escapes
// and indentation add bytes that are not tokens, so 3 over-estimates typical
// chat bodies by 10-40%; number-dense text, code and most non-Latin scripts
// land near 3. The constant covers the provider's own framing (chat
// template, tool-use system prompt). The estimate errs high on purpose: it
// only sizes a reservation, which settles to the real count; too low would
// let concurrent calls over-commit a budget. Bodies with base64 images are
// over-estimated by far (images are billed per tile, not per byte).
const (
	estimateBytesPerToken = 3
	estimateOverhead      = 512
)

// EstimateInputTokens estimates the input tokens of a JSON chat request body
// of bodyBytes bytes; see the ratio above. It never under-counts the
// recorded samples it was chosen on.
func EstimateInputTokens(bodyBytes int) int64 {
	if bodyBytes <= 0 {
		return estimateOverhead
	}
	return (int64(bodyBytes)+estimateBytesPerToken-1)/estimateBytesPerToken + estimateOverhead
}
