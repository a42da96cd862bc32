// Package wire holds the vocabulary of the parse stage: what the gateway
// reads from a model request and response (a few fields, never a full
// unmarshal), the normalised token usage of docs/design.md §12, and the Codec
// interface that each provider's adapter (wire/openai, wire/anthropic)
// implements, with what every adapter checks alike: the bounds of an
// output cap (OutputCap), the refusal of a body nested too deeply
// (ErrTooDeep), the stream error event of each API (ErrorEvent), the
// names of the tools a request offers (Request.ToolNames) and the order of
// its tool results, put in call order (OrderToolResults).
//
// It owns wire formats only. It must not touch budgets, policy, run state or
// any transport (no fasthttp, gRPC or net/http imports), so that both front
// ends (the HTTP proxy and Envoy ext_proc) reuse it unchanged.
package wire
