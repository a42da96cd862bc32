// Command langchaingo runs the framework matrix's checks with
// github.com/tmc/langchaingo's OpenAI functions agent against the gateway
// (HALTLINE_GATEWAY_URL) in front of e2e TestFrameworkMatrix's scripted
// model, and reports each check's facts on a line "RESULT {json}"; the
// prompt carries the agent's id for the scripted model.
//
// Anthropic is not in its rows: langchaingo's functions agent does not send
// its tools to Anthropic models, so no tool run is possible there.
//
// It owns only the matrix's langchaingo agent and its report; it must not
// judge the checks (TestFrameworkMatrix does) nor import the gateway's
// packages: it is a module of its own, so that the gateway's module does
// not depend on langchaingo.
package main
