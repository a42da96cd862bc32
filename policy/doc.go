// Package policy asks Haltline's Rego policies their questions (docs/design.md §11):
// the budget vector of a run, whether a model call or a tool call may go,
// the loop detector thresholds, and how a run ends.
//
// It owns the typed inputs and answers, one prepared query per Rego package,
// the merge of a policy directory over the embedded defaults (package
// rego), the Go-side defaults for whatever a policy leaves undefined, and the
// atomic reload of the compiled set. Answers are memoised per compiled set
// in a cache bounded in bytes (ristretto), keyed by the values of exactly
// the input paths a package can read (memo.go), so a reload starts with an
// empty one.
//
// It must not touch transport, budgets or run state, and it does no I/O
// during evaluation: files are read only by New, Reload and Watch, and the
// builtins that reach the network (http.send, net.lookup_ip_addr) are not
// available to policies. An evaluation error is returned as an error and is
// never read as "allow"; the caller refuses the call.
package policy
