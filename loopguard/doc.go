// Package loopguard fingerprints tool calls and tool results and detects
// runs that loop or stall (docs/design.md §6, defaults in §8).
//
// It owns two things: fingerprints and sketches (Canonicalizer) and
// detectors (Guard). It
// must not touch ending a run — a Verdict is a report; the pipeline decides
// between enforce and shadow, records the termination reason and answers the
// client — nor policy (thresholds and volatile keys arrive as values), nor
// any transport or wire format. It imports the standard library and
// wire/jsonscan, the gateway's one JSON scanner (no provider format).
//
// # Fingerprints
//
// A call's fingerprint hashes the agent id, the tool name and the canonical
// JSON of its arguments: compact, keys sorted, numbers spelt one way per
// value (exact decimal arithmetic, so 1.0 = 1 = 1e0 and -0 = 0), members
// with volatile keys removed at any depth, and volatile values inside
// strings replaced by placeholders: RFC 3339 and similar date-times, bare
// clock times with seconds, compact timestamps (20240501T120000Z,
// 20240501120000), epochs (10/13/16/19 digits starting with 1), UUIDs, hex
// runs of 16 or more and random-looking ids of 20 or more mixed-case
// alphanumerics. A date alone is kept: "the report for May 1st" and "for May
// 2nd" are different questions. Input that is not JSON is hashed as
// whitespace-folded text with the same replacements. The canonicaliser is a
// single-pass tokenizer over the bytes writing into pooled buffers; it never
// fails, never allocates in steady state, and is idempotent. Strings are
// found, checked and decoded by jsonscan (ValidString, AppendUnescaped), as
// the provider codecs read them; numbers, key order and the normalising
// of values are the canonicaliser's own.
//
// A Fingerprint also carries a shape: the hash of the canonical form with
// digit runs masked, so calls that differ only in numbers share it. See
// Fingerprint for the sizes and why.
//
// A Sketch is a 32-bucket one-permutation MinHash of the words of the same
// canonical form (string values and numbers, not keys; lowercased, stop
// words and one-letter words dropped, words of letters cut to five; words
// and neighbouring pairs), so that the estimated Jaccard similarity of two
// calls' arguments costs 32 comparisons. CallPrints computes fingerprints
// and sketch from one canonical form. See Sketch.
//
// # Detector semantics
//
// The guard sees a run as a sequence of steps (model decisions with their
// tool calls, via Step) and results arriving later (via Observe, matched by
// call id). Callers report the results a request carries before the Step
// for the decision it produces.
//
// An observation is new if the run has not yet seen that result after a
// call of the same shape. Pairing with the call's shape keeps "ok" after
// writing a.go and "ok" after writing b.go apart (progress), while "no data"
// after offset=100 and again after offset=101 is the same fact (no
// progress). The run keeps an epoch: the number of new observations so far.
// Each step records the epoch at which it was decided.
//
// The rule that keeps progress from looking like a loop: a repeat counts
// only if nothing new was observed since the earlier occurrence — both
// steps carry the same epoch. The earlier call's own result counts, so
// read → write → read, polling a job whose status moves, pagination that
// returns new items and test → fix → test with changing failures never
// count; the first repeat after a call's first result never counts either
// (that result was new).
//
//   - same_in_row (loop_detected): the newest step and the SameInRow−1
//     steps before it all contain fingerprint F and share one epoch.
//   - cycle (loop_detected): for a period p in 2..MaxCyclePeriod, the last
//     2p steps share one epoch, each of the last p steps made the same set
//     of calls as the step p before it, and the pattern is not constant.
//   - window (loop_detected): F occurs in WindowRepeats of the last Window
//     steps that share the newest step's epoch.
//   - stall (stalled): StallSteps consecutive steps whose results are all in
//     and none of which was new. Newer steps still waiting for results are
//     skipped; an older step missing a result ends the count (unknown is
//     not "nothing new").
//   - semantic (loop_detected): a call of the newest step and calls of the
//     same agent and tool in SemanticRepeats−1 earlier steps among the last
//     SemanticWindow, pairwise similar at SemanticSimilarity or more, with
//     no result new in itself observed since the oldest of them. "New in
//     itself" drops the pairing with the call's shape: a rephrased question
//     has a new shape each time, so every "no results" would be new to the
//     rule above; here only a result the run never saw counts. The guard
//     keeps a second epoch for it. Calls of one step never count against
//     each other (a fan-out is not a repeat).
//
// The loop detectors run in Step, before the calls execute, in the order
// above, semantic last and only when no other reported; the stall detector
// runs in Observe, when a step's last result arrives. With results visible, a cycle or a creeping argument usually
// ends as a stall; the cycle and window detectors matter when results do
// not pass through the gateway. A step's parallel calls form a set;
// decisions without tool calls are not recorded and neither extend nor
// break a pattern. Agent ids are part of fingerprints, so two agents making
// the same call are not repeating each other; a new observation by any
// agent of the run resets the repeat counts of all.
//
// A verdict consumes its evidence: steps up to it no longer count, so in
// shadow mode a loop that continues is reported once per full threshold
// rather than on every step. A semantic verdict consumes only the semantic
// detector's evidence (the pipeline gives it an enforcement line of its
// own, shadow by default), so it never delays another detector's verdict;
// any other verdict consumes the semantic evidence too.
//
// Known limits: a result that echoes a creeping argument ("page": 7) is new
// every time, so such a loop is left to the step budget; a job polled with
// an unchanged status SameInRow times counts as a loop. The semantic
// detector is lexical: synonyms ("rotation", "rollover") are different
// words, and a check fanned out over values in long, otherwise equal
// sentences that all get the same answer ("0 open incidents" for every
// region) looks like a rephrased loop to it.
//
// # Bounds
//
// A Guard keeps a ring of the last max(SameInRow, Window, 2·MaxCyclePeriod,
// StallSteps, SemanticWindow)+4 steps of at most MaxCallsPerStep calls (a
// call keeps its sketch, 136 bytes), and at most MaxSeenObservations
// observation keys (oldest forgotten first, which can only delay a
// verdict; with the semantic detector on, a result takes two keys). MarshalBinary writes exactly that; UnmarshalBinary
// rejects malformed or oversized input and keeps the guard's own thresholds.
package loopguard
