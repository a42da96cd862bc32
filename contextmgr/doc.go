// Package contextmgr keeps the requests Haltline forwards under a watermark
// of the model's context window (DESIGN §1 rewrite stage, §5 soft lines, §8
// defaults). Agents re-send their whole history on every call; the gateway
// rewrites what it forwards, never what the agent keeps.
//
// It owns token estimates (Estimate, NeedsRewrite), the watermark
// (Watermark), compression (Rewriter.Rewrite: cut long tool output,
// deduplicate repeated results, drop and summarise the oldest turns),
// pinned facts and blob handles for cut output (through the Blob callback
// and State.Blobs). It must not touch budgets — it reports tokens before and
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
//	chat-hitl-1                 chat         75        69   -8.0%
//	anthropic-parallel-0        messages    423       450   +6.4%
//	anthropic-parallel-1        messages    771       709   -8.0%
//	responses-phase-0           responses    63        61   -3.2%
//	responses-phase-1           responses   150       146   -2.7%
//
// Mean absolute error 5.1%, worst 8%; the test holds it within ±15%. The
// recorded requests are small (51–771 tokens) and the fixed costs (Anthropic
// tool prompt, id pricing, the Claude scale) were fitted on them, so the
// figure is in-sample: for long tool output the byte weights give about
// 4.3 characters per token on English prose and 2.5–3 on JSON and code,
// which is what o200k and Claude tokenizers do, but no recorded pair here
// measures it.
package contextmgr
