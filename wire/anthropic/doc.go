// Package anthropic is the wire codec for Anthropic's Messages API
// (POST /v1/messages): it reads the few request fields the gateway governs
// by, caps max_tokens, rewrites a request into the run's wrap-up call (or
// adds the gateway's tool and a round of its calls to it), reads
// usage, tool calls and stop reasons from responses and from SSE streams on
// the side, and renders synthetic final answers and errors in Anthropic's
// own format so that unmodified clients (the official SDKs included) accept
// them.
//
// It owns the Messages wire format only. It must not touch budgets, policy,
// run state or any transport: no fasthttp, gRPC or net/http imports, so the
// HTTP proxy and Envoy ext_proc reuse it unchanged. It never unmarshals a
// whole body: requests run to hundreds of kilobytes and are read on every
// call, so the body is walked once skipping values without decoding them
// (wire/jsonscan), the few values used are read with gjson, an output cap is
// spliced into the body (sjson for the rarer edits), and a stream is relayed
// byte for byte while it is read. A non-streamed response is read in the
// pass that validates it (its reader before, on gjson, is the tests'
// reference).
package anthropic
