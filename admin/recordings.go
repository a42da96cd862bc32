package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
)

// recordingRoutes registers run recording export and replay (issue 11).
func (a *api) recordingRoutes() {
	a.handle("GET", "/api/v1/recordings", a.auth(a.recordings))
	a.handle("POST", "/api/v1/replay", a.auth(a.replay))
}

// parseSince reads since as RFC 3339 or as a duration back from now ("24h").
func parseSince(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, true
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, true
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return time.Now().Add(-d), true
	}
	return time.Time{}, false
}

// recordings writes the recordings as JSON Lines, one run per line, so an
// export streams and a file of them concatenates.
func (a *api) recordings(w http.ResponseWriter, r *http.Request) {
	since, ok := parseSince(r.URL.Query().Get("since"))
	if !ok {
		writeError(w, 400, "since: want RFC 3339 or a duration such as 24h")
		return
	}
	recs, err := a.p.Recordings(since)
	if err != nil {
		writeError(w, 503, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w) // one object per line
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return
		}
	}
}

// replayRequest is the body of POST /api/v1/replay: a candidate policy
// (a directory on the gateway's host, or inline data.json) and which of
// the gateway's recordings to replay.
type replayRequest struct {
	PolicyDir string `json:"policy_dir"`
	// Data is a data.json document ({"haltline": {…}}) merged over the
	// embedded defaults (and over PolicyDir's).
	Data   map[string]any `json:"data"`
	Since  string         `json:"since"`
	RunIDs []string       `json:"run_ids"`
}

func (a *api) replay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, 400, "body: "+err.Error())
		return
	}
	since, ok := parseSince(req.Since)
	if !ok {
		writeError(w, 400, "since: want RFC 3339 or a duration such as 24h")
		return
	}
	data := req.Data
	if h, ok := data["haltline"].(map[string]any); ok && len(data) == 1 {
		data = h // Options.Data sits under data.haltline already
	}
	pol, err := policy.New(r.Context(), policy.Options{Dir: req.PolicyDir, Data: data})
	if err != nil {
		writeError(w, 400, "candidate policy: "+err.Error())
		return
	}
	recs, err := a.p.Recordings(since)
	if err != nil {
		writeError(w, 503, err.Error())
		return
	}
	if len(req.RunIDs) > 0 {
		recs = slices.DeleteFunc(recs, func(rec pipeline.Recording) bool { return !slices.Contains(req.RunIDs, rec.RunID) })
	}
	rep, err := pipeline.Replay(r.Context(), pipeline.ReplayOptions{Policy: pol, Catalog: a.p.Catalog()}, recs)
	if err != nil {
		writeError(w, 500, err.Error())
		return
	}
	writeJSON(w, 200, rep)
}
