// Package proxy is the HTTP front end: the fasthttp data-plane server, the
// model routes of docs/design.md §2, credentials (virtual keys or pass-through),
// upstream clients with deadline-bounded retries, SSE relay chunk by chunk,
// body limits, the bounds on client connections (in total and per
// address, listener.go, whose Accept retries what a process out of
// descriptors fails, and reports it for /readyz), the header, body and
// idle timeouts, the discarding of a refused request's body so that its
// refusal arrives, the detection of clients that hang up (fasthttp never
// cancels a request on its own), and the sockets' reads and writes as raw
// system calls (rawio.go: they never block on a nonblocking socket, and
// the runtime's bookkeeping for calls that might woke its monitor thread
// on every busy spell).
//
// It must not decide anything about budgets, policy or run state: it drives
// each model call through a pipeline.Exchange (Open, Forward, Respond,
// Feed, End, Finish) and each tool call through a pipeline.ToolExchange,
// runs the read-back rounds the pipeline asks for (readback.go) within the
// client's request, and writes the Reply the pipeline gives.
package proxy
