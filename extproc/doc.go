// Package extproc is the gateway's second front end: an Envoy external
// processor (envoy.service.ext_proc.v3) served over gRPC on its own
// listener. Envoy hands it each HTTP exchange as a sequence of messages —
// request headers, buffered request body, response headers, streamed (or
// buffered) response body — and this package turns that sequence into the
// same pipeline.Exchange the fasthttp proxy drives: Open before
// forwarding, Respond at the response headers, Feed for every response
// chunk, Finish exactly once at the end, whatever happened to the stream,
// and the Reply written as header and body mutations or an
// ImmediateResponse.
//
// It owns: the ext_proc stream → the same core calls; header and body
// mutations; ImmediateResponse for refusals and synthetic final answers;
// mapping Envoy's own local replies (upstream unreachable, timeout) onto
// transport failures, as the proxy reports them.
//
// It must not have behaviour of its own: admission, rewriting, metering and
// rendering all live in pipeline and the wire codecs. Any difference between
// this front end and the proxy is a bug; the e2e tests drive both from one
// table of cases.
//
// Envoy must run the filter with request_body_mode BUFFERED,
// response_body_mode STREAMED and allow_mode_override: true (the server
// switches non-streamed responses to BUFFERED so it can replace them); see
// examples/envoy/README.md.
package extproc
