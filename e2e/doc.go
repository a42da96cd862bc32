// Package e2e drives the whole gateway the way users do: the official
// openai-go and anthropic-sdk-go clients pointed at it with WithBaseURL,
// against httptest upstreams that replay the recorded wire formats in
// testdata/ (copied from the shared fixtures).
//
// It holds tests only; it must not be imported.
package e2e
