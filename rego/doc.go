// Package rego holds Haltline's default policies: one Rego package per
// question the gateway asks (docs/design.md §11), each with its Rego unit tests, and
// the defaults' data.json. They are embedded in the binary through FS.
//
// Data keys under data.haltline are plural (budgets, models, tools, loops,
// terminations, teams) because data.haltline.<package> is the package's own
// document; tool_defaults holds the tool question's defaults.
//
// It owns the default answers of §8 written as Rego, so a platform team can
// read, copy and override them. It must not hold Go logic: loading, merging
// with a policy directory, evaluation and the Go-side fallbacks live in
// package policy.
package rego
