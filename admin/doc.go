// Package admin is the control plane (docs/design.md §7): the runs API, cancel and
// resume, metrics, health and readiness, behind a bearer token when one is
// set. It runs on its own listener with net/http.
//
// It also owns what keeps a browser page elsewhere from using it (guard.go):
// a Host it is not known by (DNS rebinding) and a foreign Origin are refused
// with 403, a write not declared application/json with 415, and a known
// route asked with another method answers 405 with Allow.
//
// It must not sit on the data plane's hot path: it reads run records and
// asks the pipeline to act, nothing more.
package admin
