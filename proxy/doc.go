// Package proxy is the HTTP front end: the fasthttp data-plane server, the
// model routes of DESIGN §2, credentials (virtual keys or pass-through),
// upstream clients with deadline-bounded retries, SSE relay chunk by chunk,
// body limits, and the detection of clients that hang up (fasthttp never
// cancels a request on its own).
//
// It must not decide anything about budgets, policy or run state: it turns
// each request into pipeline.Begin / Turn.Feed / pipeline.Finish and writes
// what the pipeline answers.
package proxy
