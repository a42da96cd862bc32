// Package mcp owns the wire format of MCP over streamable HTTP (protocol
// 2025-11-25) as the gateway needs it: parsing JSON-RPC messages from a
// request body and from a JSON or SSE response body, reading tools/call
// parameters and tools/list answers (input schemas and annotations),
// building results, isError tool results and errors, a pragmatic JSON
// schema check of tool arguments, and SSE framing of messages.
//
// It must not import fasthttp, gRPC or net/http, nor know about runs,
// budgets or policy: the proxy and the pipeline compose it.
package mcp
