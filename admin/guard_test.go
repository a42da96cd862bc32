package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/haltline/haltline/admin"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
)

// call sends one request to the control plane and returns the status, the
// headers and the body.
func call(t *testing.T, method, url, host string, header map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// errorMessage is the message of a JSON error body, "" when the body is not one.
func errorMessage(body string) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Message
}

// Without a token, a page on another origin cannot end a run: not with the
// text/plain or form POST a browser sends without a preflight, not with a
// JSON one either. The control plane's own page and the CLI still can.
func TestCrossOriginWriteRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	waitingRun(t, g, "r-guard")
	base := "http://" + g.AdminAddr
	cancelURL := base + "/api/v1/runs/r-guard/cancel"
	reason := func() string {
		var rec struct {
			Status string `json:"status"`
			Reason string `json:"reason"`
		}
		apiGet(t, base+"/api/v1/runs/r-guard", &rec)
		if rec.Status == "" {
			t.Fatalf("no run r-guard")
		}
		return rec.Reason
	}
	for _, tc := range []struct {
		desc   string
		header map[string]string
		status int
	}{
		{"text/plain from another origin", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, 403},
		{"JSON from another origin", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, 403},
		{"JSON from another local port", map[string]string{"Origin": "http://localhost:3000", "Content-Type": "application/json"}, 403},
		{"JSON from an opaque origin", map[string]string{"Origin": "null", "Content-Type": "application/json"}, 403},
		{"text/plain, no origin", map[string]string{"Content-Type": "text/plain"}, 415},
		{"form, no origin", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"no content type", nil, 415},
	} {
		status, h, body := call(t, "POST", cancelURL, "", tc.header, "{}")
		if status != tc.status || !strings.Contains(h.Get("Content-Type"), "application/json") || errorMessage(body) == "" {
			t.Errorf("%s: %d %q %.200s, want %d with a JSON error", tc.desc, status, h.Get("Content-Type"), body, tc.status)
		}
		if r := reason(); r != "" {
			t.Fatalf("%s: the run ended (%s)", tc.desc, r)
		}
	}
	// Approvals read their body only when it is declared JSON.
	if status, _, body := call(t, "POST", base+"/api/v1/approvals/t-none", "", map[string]string{"Content-Type": "text/plain"},
		`{"decision":"approve"}`); status != 415 {
		t.Errorf("text/plain approval: %d %.200s, want 415", status, body)
	}
	// The page's own origin, under a loopback name the listener is also
	// reached by, with a charset parameter.
	_, port, _ := strings.Cut(g.AdminAddr, ":")
	status, _, body := call(t, "POST", cancelURL, "", map[string]string{
		"Origin": "http://localhost:" + port, "Content-Type": "application/json; charset=utf-8"}, "")
	if status != 200 || reason() != "cancelled" {
		t.Fatalf("same-origin cancel: %d %.300s", status, body)
	}
}

// guardHandler is the control plane alone, listening (by its options) on
// listen with the allow-lists given.
func guardHandler(t *testing.T, listen string, hosts, origins []string) *httptest.Server {
	t.Helper()
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{
		Pipeline: pipeline.New(pipeline.Options{Policy: pol}), Gatherer: prometheus.NewRegistry(),
		Listen: listen, AllowedHosts: hosts, AllowedOrigins: origins,
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A name the control plane is not known by is a DNS rebinding read or
// write: refused on every route but the probes and the scrape, which
// answer whatever name service discovery uses.
func TestForeignHostRefused(t *testing.T) {
	t.Parallel()
	srv := guardHandler(t, "0.0.0.0:9090", []string{"Haltline.internal", "console.example:8443"}, nil)
	for _, tc := range []struct {
		path, host string
		status     int
	}{
		{"/api/v1/approvals", "evil.example:9090", 403},
		{"/api/v1/runs", "evil.example", 403},
		{"/ui/", "evil.example:9090", 403},
		{"/ui/app.js", "evil.example:9090", 403},
		{"/api/v1/approvals", "localhost.evil.example:9090", 403},
		{"/api/v1/approvals", "console.example:9090", 403},
		{"/healthz", "evil.example:9090", 200},
		{"/readyz", "evil.example:9090", 200},
		{"/metrics", "evil.example:9090", 200},
		{"/api/v1/approvals", "localhost:19090", 200},
		{"/api/v1/approvals", "127.0.0.1:9090", 200},
		{"/api/v1/approvals", "[::1]:9090", 200},
		{"/api/v1/approvals", "10.1.2.3:9090", 200},
		{"/ui/", "localhost:9090", 200},
		{"/api/v1/approvals", "haltline.internal:9090", 200},
		{"/api/v1/approvals", "HALTLINE.INTERNAL", 200},
		{"/api/v1/approvals", "console.example:8443", 200},
	} {
		status, h, body := call(t, "GET", srv.URL+tc.path, tc.host, nil, "")
		if status != tc.status {
			t.Errorf("GET %s Host %s: %d %.200s, want %d", tc.path, tc.host, status, body, tc.status)
		}
		if status == 403 && (!strings.Contains(h.Get("Content-Type"), "application/json") || !strings.Contains(errorMessage(body), "allowed_hosts")) {
			t.Errorf("GET %s Host %s: 403 without a JSON error: %q %.200s", tc.path, tc.host, h.Get("Content-Type"), body)
		}
	}
}

// An Origin must be the control plane's: the Host it was reached by, its
// listen address under each loopback name, or a configured one.
func TestOriginChecked(t *testing.T) {
	t.Parallel()
	srv := guardHandler(t, "127.0.0.1:9090", nil, []string{"https://console.example/"})
	for _, tc := range []struct {
		origin string
		status int
	}{
		{"", 200},
		{srv.URL, 200},
		{"http://localhost:9090", 200},
		{"http://127.0.0.1:9090", 200},
		{"http://[::1]:9090", 200},
		{"https://console.example", 200},
		{"https://CONSOLE.example", 200},
		{"http://localhost:9091", 403},
		{"https://console.example:8443", 403},
		{"http://evil.example", 403},
		{"null", 403},
		{"file://", 403},
	} {
		h := map[string]string{}
		if tc.origin != "" {
			h["Origin"] = tc.origin
		}
		if status, _, body := call(t, "GET", srv.URL+"/api/v1/approvals", "", h, ""); status != tc.status {
			t.Errorf("Origin %q: %d %.200s, want %d", tc.origin, status, body, tc.status)
		}
	}
}

// A known route asked with another method says which methods it takes; an
// unknown route stays 404.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	srv := guardHandler(t, "127.0.0.1:9090", nil, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"DELETE", "/api/v1/runs/r-1/cancel", 405, "POST"},
		{"GET", "/api/v1/runs/r-1/cancel", 405, "POST"},
		{"PUT", "/api/v1/approvals/t-1", 405, "GET, HEAD, POST"},
		{"POST", "/api/v1/runs", 405, "GET, HEAD"},
		{"PATCH", "/api/v1/runs/r-1", 405, "GET, HEAD"},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"GET", "/api/v1/nope", 404, ""},
		{"DELETE", "/api/v1/nope/r-1/cancel", 404, ""},
	} {
		status, h, body := call(t, tc.method, srv.URL+tc.path, "", map[string]string{"Content-Type": "application/json"}, "")
		if status != tc.status || h.Get("Allow") != tc.allow || errorMessage(body) == "" {
			t.Errorf("%s %s: %d Allow %q %.200s, want %d Allow %q with a JSON error",
				tc.method, tc.path, status, h.Get("Allow"), body, tc.status, tc.allow)
		}
	}
	// Behind the token like the routes themselves.
	tok := httptest.NewServer(admin.Handler(admin.Options{Token: "tok"}))
	t.Cleanup(tok.Close)
	if status, _, _ := call(t, "DELETE", tok.URL+"/api/v1/runs/r-1/cancel", "", nil, ""); status != 401 {
		t.Errorf("405 without the token: %d, want 401", status)
	}
}
