// Package accounting owns money and budgets: the price catalog, cost of a
// call from its normalised usage, the worst case of a call before it is
// forwarded, the ledgers a run draws on (run, session, parent run, team
// window), atomic reservations across those ledgers with a lease, and their
// settlement from the providers' usage.
//
// It must not touch transport (no net/http, fasthttp or gRPC), policy (it is
// told the limits and answers whether a want fits; it never decides what a
// refusal means for the run) or run state (counters, states, records live in
// run state; accounting keeps only what the ledgers need). Money is never a
// float here: Money is an integer count of pico-USD, prices are parsed from
// their decimal text, and floats appear only at the edges (USD, Money.USD)
// for display.
//
// The flow for one model call, as the pipeline drives it:
//
//	price, ok := catalog.Lookup(req.Model)          // unknown model: caller decides
//	in := accounting.ReserveInput(contextmgr.Estimate(req.API, body)) // estimate + margin
//	want := accounting.Vector{Steps: 1, InputTokens: in, OutputTokens: maxOut,
//		Tokens: in + maxOut, Cost: price.WorstCase(in, maxOut)}
//	r, short := leases.Reserve(ledgers, want, false, lease, now) // all or nothing
//	...forward...
//	actual := accounting.UsageVector(usage, price.Cost(provider, usage))
//	actual.Steps = 1
//	r.Settle(actual, now) // or r.Release() when nothing was spent
//
// Invariant: whatever the concurrency, spent plus reserved never exceeds a
// ledger's limit through Reserve; only Settle may push spent past a limit,
// when a call used more than it reserved (its input was over the estimate
// and margin, and it wrote close to its output cap), and it says so.
package accounting
