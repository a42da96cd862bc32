// Package demo is `gateway demo`: a built-in scripted model that speaks the
// OpenAI Chat Completions format (streaming and not, with real usage
// blocks), and scripted agents that drive real runs through the gateway
// with the official openai-go client — no API key, no network.
//
// It must not reach into the gateway's internals: it talks HTTP to the data
// plane and the control plane, as a user would.
package demo
