// Package admin is the control plane (DESIGN §7): the runs API, cancel and
// resume, metrics, health and readiness, behind a bearer token when one is
// set. It runs on its own listener with net/http.
//
// It must not sit on the data plane's hot path: it reads run records and
// asks the pipeline to act, nothing more.
package admin
