// Package telemetry is the only importer of Prometheus: the gateway's
// metrics, built on an injected Registerer (never the global registry), and
// the names of log keys. It implements pipeline.Observer.
//
// Run, session and agent ids are never metric labels: their number is
// unbounded.
package telemetry
