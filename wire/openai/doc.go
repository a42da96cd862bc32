// Package openai is the wire format of the two OpenAI model APIs the gateway
// governs: Chat Completions (Chat, POST /v1/chat/completions) and Responses
// (Responses, POST /v1/responses). Both implement wire.Codec.
//
// It owns reading requests and responses (a few fields, never a full
// unmarshal: bodies reach 200 KB and this runs on every call), the usage tap
// on SSE streams including the removal of the usage chunk the gateway asked
// for on the client's behalf, the rewrites of a forwarded body (include_usage,
// output cap, wrap-up, the gateway's tool and a round of its calls), the synthetic final answer, and error bodies in
// OpenAI's format.
//
// It must not touch budgets, policy, run state or any transport: no fasthttp,
// gRPC or net/http imports outside tests, so that both front ends reuse it.
// Bodies it is given are read-only; every rewrite returns a new slice.
package openai
