// Package telemetry is the only importer of Prometheus and OpenTelemetry:
// the gateway's metrics (built on an injected Registerer, never the global
// registry), its traces (one per run, a span per state, a child span per
// upstream call with the GenAI semantic conventions), the names of log
// keys and the LogWriter that writes the log's lines off the call path.
// Observer implements pipeline.Observer on top of them.
//
// Run, session and agent ids are never metric labels: their number is
// unbounded. They are span attributes and log fields instead. Secrets,
// prompts and tool arguments reach neither: arguments only as hashes.
//
// It must not be imported by domain packages; they report through
// pipeline.Observer.
package telemetry
