package app

import "github.com/haltline/haltline/telemetry"

// Option adjusts Start beyond what the configuration file can say.
type Option func(*startOptions)

type startOptions struct {
	spanExporter telemetry.SpanExporter
}

// WithSpanExporter turns tracing on with e as the exporter, whatever the
// configuration says; tests pass an in-memory exporter.
func WithSpanExporter(e telemetry.SpanExporter) Option {
	return func(o *startOptions) { o.spanExporter = e }
}
