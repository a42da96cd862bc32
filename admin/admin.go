package admin

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/runstate"
)

// Options configure the control plane.
type Options struct {
	Pipeline *pipeline.Pipeline
	Gatherer prometheus.Gatherer
	// Token, when set, is required as a bearer token on /api/v1/*.
	Token  string
	Logger *slog.Logger
	// Ready reports readiness (store reachable, data plane accepting
	// connections); nil = ready.
	Ready func() error
	// Listen is the address the control plane listens on (host:port, as
	// bound): its own origin, and under loopback or every address, each
	// loopback name's at the same port.
	Listen string
	// AllowedHosts are further names a browser may reach the control plane
	// under ("name" at any port, or "name:port"); IP literals and localhost
	// need none.
	AllowedHosts []string
	// AllowedOrigins are further origins (scheme://host[:port]) whose pages
	// may call the control plane.
	AllowedOrigins []string
}

// Handler returns the control plane's HTTP handler.
func Handler(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &api{o: o, p: o.Pipeline, routes: newRoutes()}
	a.handle("GET", "/healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	a.handle("GET", "/readyz", a.readyz)
	if o.Gatherer != nil {
		a.handle("GET", "/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	}
	a.handle("GET", "/api/v1/runs", a.auth(a.list))
	a.handle("GET", "/api/v1/runs/{id}", a.auth(a.show))
	a.handle("GET", "/api/v1/runs/{id}/events", a.auth(a.events))
	a.handle("POST", "/api/v1/runs/{id}/cancel", a.auth(a.cancel))
	a.handle("POST", "/api/v1/runs/{id}/resume", a.auth(a.resume))
	a.toolRoutes()      // approvals and blobs (approvals.go)
	a.recordingRoutes() // recording export and replay (recordings.go)
	a.handle("GET", "/ui/", uiHandler().ServeHTTP)
	a.handle("GET", "/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently).ServeHTTP)
	a.methodNotAllowed(func(path string, h http.HandlerFunc) http.HandlerFunc {
		if strings.HasPrefix(path, "/api/") {
			return a.auth(h)
		}
		return h
	})
	// Profiles for the SRE (behind the token like the API). Every method:
	// go tool pprof may POST to /debug/pprof/symbol; all of it only reads.
	a.mux.HandleFunc("/debug/pprof/", a.auth(pprof.Index))
	a.mux.HandleFunc("/debug/pprof/profile", a.auth(pprof.Profile))
	a.mux.HandleFunc("/debug/pprof/trace", a.auth(pprof.Trace))
	a.mux.HandleFunc("/api/", a.auth(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 404, "no such route")
	}))
	return newGuard(o).wrap(a.mux)
}

type api struct {
	*routes
	o Options
	p *pipeline.Pipeline
}

func (a *api) auth(h http.HandlerFunc) http.HandlerFunc {
	if a.o.Token == "" {
		return h
	}
	want := []byte("Bearer " + a.o.Token)
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="haltline"`)
			writeError(w, 401, "missing or wrong bearer token")
			return
		}
		h(w, r)
	}
}

func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	if a.o.Ready != nil {
		if err := a.o.Ready(); err != nil {
			writeJSON(w, 503, map[string]string{"status": "not ready", "error": err.Error()})
			return
		}
	}
	writeJSON(w, 200, map[string]string{"status": "ready"})
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := runstate.Filter{Status: q.Get("status"), Reason: q.Get("reason"), Tenant: q.Get("tenant")}
	if s := q.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			writeError(w, 400, "since: want RFC 3339")
			return
		}
		f.Since = t
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, 400, "limit: want a number")
			return
		}
		f.Limit = n
	}
	runs, err := a.p.Records(f)
	if err != nil {
		writeError(w, 503, "run store unavailable: "+err.Error())
		return
	}
	if runs == nil {
		runs = []runstate.Record{}
	}
	writeJSON(w, 200, map[string]any{"runs": runs, "count": len(runs)})
}

// runRef is the run a route names: {id}, within ?tenant= when given —
// needed where runs of several tenants share the name.
func runRef(r *http.Request) string {
	return pipeline.RunRef(r.PathValue("id"), r.URL.Query().Get("tenant"))
}

// writeAmbiguous answers 409 with the tenants to choose from when err says
// a bare name is used by several tenants' runs; it reports whether it did.
func writeAmbiguous(w http.ResponseWriter, err error) bool {
	var amb *pipeline.AmbiguousRunError
	if !errors.As(err, &amb) {
		return false
	}
	writeJSON(w, 409, map[string]any{"error": amb.Error(), "tenants": amb.Tenants})
	return true
}

func (a *api) show(w http.ResponseWriter, r *http.Request) {
	rec, ok, err := a.p.Record(runRef(r))
	switch {
	case writeAmbiguous(w, err):
	case err != nil:
		writeError(w, 503, "run store unavailable: "+err.Error())
	case !ok:
		writeError(w, 404, "no such run")
	default:
		writeJSON(w, 200, rec)
	}
}

func (a *api) events(w http.ResponseWriter, r *http.Request) {
	evs, ok, err := a.p.Events(runRef(r))
	switch {
	case writeAmbiguous(w, err):
	case err != nil:
		writeError(w, 503, "run store unavailable: "+err.Error())
	case !ok:
		writeError(w, 404, "no such run")
	default:
		if evs == nil {
			evs = []runstate.Event{}
		}
		writeJSON(w, 200, map[string]any{"run_id": r.PathValue("id"), "events": evs})
	}
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	rec, err := a.p.Cancel(runRef(r))
	switch {
	case writeAmbiguous(w, err):
	case errors.Is(err, pipeline.ErrNoRun):
		writeError(w, 404, err.Error())
	case errors.Is(err, pipeline.ErrAlreadyEnded):
		writeJSON(w, 409, map[string]any{"error": err.Error(), "run": rec})
	case err != nil:
		writeError(w, 503, "run store unavailable: "+err.Error())
	default:
		a.o.Logger.Info("run cancelled", "run_id", rec.ID, "tenant", rec.Tenant)
		writeJSON(w, 200, rec)
	}
}

// resumeRequest adds budget to a recoverable run: X-Run-Budget keys.
type resumeRequest struct {
	ResumeToken string `json:"resume_token"`
	AddBudget   string `json:"add_budget"` // e.g. "max_steps=10,max_cost_usd=0.5"
}

func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	var req resumeRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeError(w, 400, "cannot read body")
		return
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, 400, "body: "+err.Error())
			return
		}
	}
	var add accounting.Budget
	if req.AddBudget != "" {
		if add, err = accounting.ParseBudgetHeader(req.AddBudget); err != nil {
			writeError(w, 400, "add_budget: "+err.Error())
			return
		}
	}
	rec, err := a.p.Resume(runRef(r), req.ResumeToken, add)
	switch {
	case writeAmbiguous(w, err):
	case errors.Is(err, pipeline.ErrNoRun):
		writeError(w, 404, err.Error())
	case err != nil:
		writeJSON(w, 409, map[string]any{"error": err.Error(), "run": rec})
	default:
		a.o.Logger.Info("run resumed", "run_id", rec.ID, "tenant", rec.Tenant)
		writeJSON(w, 200, rec)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": strings.TrimSpace(msg)}})
}
