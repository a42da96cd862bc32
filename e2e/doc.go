// Package e2e drives the whole gateway the way users do: the official
// openai-go and anthropic-sdk-go clients pointed at it with WithBaseURL,
// against httptest upstreams that replay the recorded wire formats in
// testdata/ (copied from the shared fixtures).
//
// frameworks/ is the framework matrix that TestFrameworkMatrix drives: a
// Node project (agent frameworks pinned in its package-lock.json) and a Go
// module of its own for langchaingo, so that this module does not depend
// on it; both run against the gateway and the scripted model of
// frameworks_model_test.go.
//
// It holds tests only; it must not be imported.
package e2e
