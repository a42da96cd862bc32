// Package contextmgr keeps the requests Haltline forwards under a watermark
// of the model's context window (docs/design.md §1 rewrite stage, §5 soft lines, §8
// defaults). Agents re-send their whole history on every call; the gateway
// rewrites what it forwards, never what the agent keeps.
//
// It owns token estimates (Estimate, NeedsRewrite, EstimateCache: the one
// estimator of the gateway, for the watermark and the budget reservation
// alike), the watermark (Watermark), compression (Rewriter.Rewrite: cut
// long tool output, deduplicate repeated results, drop and summarise the
// oldest turns), pinned facts and blob handles for cut output (through the
// Blob callback and State.Blobs). It must not touch budgets — it reports tokens before and
// after, accounting decides — and it never mutates its input: Rewrite
// returns a new body, or the same slice when nothing needs to change.
//
// # Calling it
//
// On every model call, once the request is parsed:
//
//	wm := contextmgr.Watermark(window, contextmgr.Params{Tighten: pastCompressLine})
//	if est, needs := contextmgr.NeedsRewrite(api, body, wm); needs {
//		body, rep, err = rw.Rewrite(ctx, api, body, wm, runState) // runState *State, one per run
//	}
//
// NeedsRewrite is one pass over the body without allocation; Rewrite is the
// heavier path, taken only over the watermark. Persist the run's State (it
// is JSON) after a Rewrite that reports Compressed or new Blobs.
//
// # Reading JSON
//
// A body is read once by the package's reader, which validates, weighs and
// locates the items in one pass; strings are found, checked and decoded by
// wire/jsonscan, the gateway's one JSON scanner. The shapes the fast item
// readers leave alone (member names with escapes, items that are not
// objects, content objects) are read member by member through
// jsonscan.Value, which reads as gjson and the upstreams read. Edits by
// path (a system prompt appended to, a list set where the slow reader could
// not locate it) go through sjson.
//
// # Stability of the cached prefix
//
// Prompt caches key on the prompt's prefix. A compression drops turns down
// to CompressTo (0.5) × the watermark and records the cut in State; the
// following calls of the run reuse that cut, summary and facts, so each
// forwarded request starts with the previous one byte for byte until the
// next compression. Kept items are forwarded as the agent sent them; a cut
// tool output is cut into the same bytes on every call (its handle is
// remembered); a repeated result always refers to its first kept
// occurrence. The summary and the pinned facts are appended to the agent's
// own system text (Anthropic system, Responses instructions, the first
// system message), so the agent's system prompt stays the cached prefix
// even across compressions.
//
// # Estimator accuracy
//
// The estimator weighs bytes (see estimate.go for the weights and why).
// Against the providers' own input token counts on the recorded pairs in
// testdata/usage (TestEstimateAgainstRecordedUsage):
//
//	request                     API        real  estimate  error
//	chat-roundtrip-0            chat         71        70   -1.4%
//	chat-hitl-0                 chat         51        48   -5.9%
//	chat-hitl-1                 chat         75        71   -5.3%
//	anthropic-parallel-0        messages    423       452   +6.9%
//	anthropic-parallel-1        messages    771       711   -7.8%
//	responses-phase-0           responses    63        61   -3.2%
//	responses-phase-1           responses   150       149   -0.7%
//
// Mean absolute error 4.4%, worst 7.8%; the test holds it within ±15%. The
// recorded requests are small (51–771 tokens) and the fixed costs (Anthropic
// tool prompt, id pricing, the Claude scale) were fitted on them. Longer
// content is measured against o200k_base (the tokenizer of gpt-4o and later)
// on a corpus per content class in testdata/tokref, generated once by
// gen.mjs with the npm package gpt-tokenizer (TestEstimatorError; per class,
// chat and responses alike, + is high):
//
//	class   samples  median   p95 |err|  lowest  highest
//	prose         8  +16.7%     19.5%    +8.5%   +19.5%
//	json          8  -12.5%     15.4%   -15.4%   +13.6%
//	code          8   +5.6%      8.8%    +1.1%    +8.8%
//	cjk           8  +27.0%     30.9%   +21.1%   +30.9%
//	tools         6   +5.0%     10.5%    -2.3%   +10.5%
//
// The test fails beyond -20% or +50% on any sample. JSON is low when it is
// pretty-printed (indentation is a token the spaces do not carry) and high
// when compact. No tokenizer of Claude's is public, so Anthropic is
// measured only on the recorded pairs. The pipeline reserves the estimate
// plus a margin (accounting.ReserveInput) and corrects a run's next
// reservations by the provider's count.
package contextmgr
