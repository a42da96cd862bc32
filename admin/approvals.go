package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/haltline/haltline/pipeline"
)

// toolRoutes registers the tool governance routes (docs/design.md §7): approval
// tickets and the full text of cut tool results.
func (a *api) toolRoutes() {
	a.handle("GET", "/api/v1/approvals", a.auth(a.approvals))
	a.handle("GET", "/api/v1/approvals/{ticket}", a.auth(a.approval))
	a.handle("POST", "/api/v1/approvals/{ticket}", a.auth(a.decide))
	a.handle("GET", "/api/v1/runs/{id}/blobs/{handle}", a.auth(a.blob))
}

func (a *api) approvals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	list := a.p.Approvals(pipeline.ApprovalFilter{Status: q.Get("status"), RunID: q.Get("run_id")})
	if list == nil {
		list = []pipeline.Approval{}
	}
	for i := range list {
		list[i] = list[i].Shown()
	}
	writeJSON(w, 200, map[string]any{"approvals": list, "count": len(list)})
}

func (a *api) approval(w http.ResponseWriter, r *http.Request) {
	t, err := a.p.Ticket(r.PathValue("ticket"))
	if err != nil {
		writeError(w, 404, err.Error())
		return
	}
	writeJSON(w, 200, t.Shown())
}

// decideRequest is the body of POST /api/v1/approvals/{ticket}.
type decideRequest struct {
	Decision string `json:"decision"` // approve | deny
	// By names who decided; without it the bearer principal is recorded.
	By string `json:"by"`
}

func (a *api) decide(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeError(w, 400, "cannot read body")
		return
	}
	var req decideRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, 400, "body: want {\"decision\":\"approve\"|\"deny\"}")
		return
	}
	by := strings.TrimSpace(req.By)
	if len(by) > 200 {
		by = by[:200]
	}
	if by == "" {
		by = a.principal(r)
	}
	t, err := a.p.Decide(r.PathValue("ticket"), req.Decision, by)
	t = t.Shown()
	switch {
	case errors.Is(err, pipeline.ErrBadDecision):
		writeError(w, 400, err.Error())
	case errors.Is(err, pipeline.ErrNoTicket):
		writeError(w, 404, err.Error())
	case err != nil:
		writeJSON(w, 409, map[string]any{"error": map[string]string{"message": err.Error()}, "approval": t})
	default:
		a.o.Logger.Info("approval decided", "ticket", t.Ticket, "run_id", t.RunID, "tenant", t.Tenant, "decision", t.Status, "by", t.DecidedBy)
		writeJSON(w, 200, t)
	}
}

// principal names the caller of the control plane: the bearer token by its
// id (never the token), or "anonymous" when no token is configured.
func (a *api) principal(r *http.Request) string {
	if a.o.Token == "" {
		return "anonymous"
	}
	return "bearer:" + pipeline.KeyID(a.o.Token)
}

func (a *api) blob(w http.ResponseWriter, r *http.Request) {
	text, err := a.p.Blob(pipeline.BlobOfRun(runRef(r)), r.PathValue("handle"))
	if err != nil {
		if !writeAmbiguous(w, err) {
			writeError(w, 404, err.Error())
		}
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(200)
	_, _ = io.WriteString(w, text)
}
