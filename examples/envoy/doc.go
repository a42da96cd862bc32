// Package envoy holds a complete sample Envoy configuration (envoy.yaml)
// that puts Haltline's ext_proc server in front of the model providers, and
// a test that validates it against Envoy's API protos.
//
// It owns: the sample configuration and its validation. It must not hold
// gateway code: the ext_proc server is package extproc.
package envoy
