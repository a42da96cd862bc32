package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/demo"
)

const uiToken = "ui-test-admin-token"

// uiGateway starts the gateway with the demo's scripted model and an admin
// token, drives the demo agents (a completed run, a loop the guard stops, a
// wrap-up), and leaves one run waiting for its tool results.
func uiGateway(t *testing.T) *app.Gateway {
	t.Helper()
	g := startGateway(t, uiToken)
	for _, a := range demo.Agents {
		// The record printing at the end needs the token it lacks; the
		// agents have run by then.
		_ = demo.Run(t.Context(), io.Discard, "http://"+g.DataAddr, "http://"+g.AdminAddr, []demo.Agent{a})
	}
	waitingRun(t, g, "r-ui-active")
	return g
}

// startGateway starts the gateway on 127.0.0.1 with the demo's scripted
// model and the admin token given (none when empty).
func startGateway(t *testing.T, token string) *app.Gateway {
	t.Helper()
	model := httptest.NewServer(&demo.Model{})
	t.Cleanup(model.Close)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL, cfg.Providers.Anthropic.BaseURL = model.URL, model.URL
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	cfg.Admin.Token = token
	g, err := app.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return g
}

// waitingRun leaves run id waiting for the results of the tool call the
// scripted model asks for.
func waitingRun(t *testing.T, g *app.Gateway, id string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+g.DataAddr+"/v1/chat/completions", strings.NewReader(
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Check order 1234."}],`+
			`"tools":[{"type":"function","function":{"name":"lookup_order","parameters":{"type":"object"}}}]}`))
	req.Header.Set("Authorization", "Bearer sk-agent")
	req.Header.Set("X-Run-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func apiGet(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+uiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// artifacts is where screenshots go: $HALTLINE_ARTIFACTS, else a temp dir.
func artifacts(t *testing.T) string {
	if d := os.Getenv("HALTLINE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// The page's files are served without the token; the data behind them is not.
func TestUIStaticFiles(t *testing.T) {
	t.Parallel()
	g := uiGateway(t)
	base := "http://" + g.AdminAddr
	for _, tc := range []struct {
		desc, path, contentType string
		status                  int
		body                    string
	}{
		{"page", "/ui/", "text/html", 200, `<script src="app.js">`},
		{"script", "/ui/app.js", "javascript", 200, "/api/v1/runs"},
		{"styles", "/ui/style.css", "text/css", 200, ".state-bar"},
		{"no such file", "/ui/nope.js", "", 404, ""},
		{"api needs the token", "/api/v1/runs", "application/json", 401, "bearer"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			resp, err := http.Get(base + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(resp.Header.Get("Content-Type"), tc.contentType) ||
				!strings.Contains(string(b), tc.body) {
				t.Fatalf("%d %q: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			if tc.status == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
				t.Errorf("no CSP on %s", tc.path)
			}
		})
	}
}

// In headless Chromium: the page asks for the token once, lists the runs
// with live counts, shows a terminated run's reason, evidence and timeline,
// and cancels a waiting run with its button. Screenshots go to artifacts.
func TestUIInBrowser(t *testing.T) {
	t.Parallel()
	g := uiGateway(t)
	var list struct {
		Runs []struct {
			ID     string `json:"run_id"`
			Status string `json:"status"`
			Reason string `json:"reason"`
			Model  string `json:"model"`
		} `json:"runs"`
	}
	apiGet(t, "http://"+g.AdminAddr+"/api/v1/runs", &list)
	loopID, loopModel := "", ""
	for _, r := range list.Runs {
		if r.Reason == "loop_detected" {
			loopID, loopModel = r.ID, r.Model
		}
	}
	if loopID == "" || loopModel == "" || len(list.Runs) != 4 {
		t.Fatalf("runs: %+v", list.Runs)
	}
	dir := artifacts(t)
	b := startBrowser(t)
	base := "http://" + g.AdminAddr + "/ui/"

	// The token, asked once.
	b.navigate(base)
	b.waitFor("the token form", `!document.querySelector("#login").hidden`)
	b.eval(`document.querySelector("#token").value = ` + jsString(uiToken) + `; document.querySelector("#login-form").requestSubmit(); true`)

	// The runs list.
	b.waitFor("the runs table", `document.querySelectorAll("#runs-table tbody tr").length === 4`)
	if got := b.text(`#runs-table tbody tr[data-run="` + loopID + `"] .reason`); got != "loop_detected" {
		t.Errorf("list row reason %q, want loop_detected", got)
	}
	b.waitFor("live counts", `document.querySelector("#count-active").textContent === "1"`)
	if got := b.text(`#count-reasons [data-reason="loop_detected"]`); !strings.Contains(got, "1") {
		t.Errorf("termination reason count %q", got)
	}
	// Each run names its model and its last activity.
	if got := b.text(`#runs-table tbody tr[data-run="` + loopID + `"] .model`); got != loopModel {
		t.Errorf("list row model %q, want %q", got, loopModel)
	}
	if got := b.text(`#runs-table tbody tr[data-run="r-ui-active"] .last-activity`); !strings.HasPrefix(got, "20") {
		t.Errorf("list row last activity %q", got)
	}
	// Live runs idle past the threshold are marked; ended runs never are.
	// The waiting run has just been active: under the default threshold it
	// is not idle; with the threshold at 0 it is.
	if n := string(b.eval(`document.querySelectorAll("#runs-table .idle-mark").length`)); n != "0" {
		t.Errorf("%s runs marked idle under the default threshold, want 0", n)
	}
	b.eval(`const i = document.querySelector("#filters input[name=idle]"); i.value = "0"; i.dispatchEvent(new Event("change", {bubbles: true})); true`)
	b.waitFor("the idle mark", `document.querySelectorAll("#runs-table .idle-mark").length > 0`)
	if got := string(b.eval(`Array.from(document.querySelectorAll("#runs-table tr.idle")).map((r) => r.dataset.run).join(",")`)); got != `"r-ui-active"` {
		t.Errorf("runs marked idle: %s, want the waiting run alone", got)
	}
	if got := b.text(`#runs-table tbody tr[data-run="r-ui-active"] .status`); !strings.Contains(got, "idle") {
		t.Errorf("the waiting run's status cell %q lacks the idle mark", got)
	}
	// A filter narrows the table.
	b.eval(`const s = document.querySelector("#filters select[name=reason]"); s.value = "loop_detected"; s.dispatchEvent(new Event("change")); true`)
	b.waitFor("the filtered table", `document.querySelectorAll("#runs-table tbody tr").length === 1`)
	save(t, dir, "ui-runs-list.png", b.screenshot())

	// The terminated run's page.
	b.navigate(base + "#/runs/" + loopID)
	b.waitFor("the run page", `document.querySelector("#run-id").textContent === `+jsString(loopID)+` && document.body.dataset.ready === "true"`)
	b.waitFor("the timeline", `document.querySelectorAll("#timeline tbody tr.event").length > 8`)
	if got := b.text("#run-reason"); got != "loop_detected" {
		t.Errorf("reason shown %q, want loop_detected", got)
	}
	if got := b.text("#run-evidence"); !strings.Contains(got, "detector") || !strings.Contains(got, "query_logs") {
		t.Errorf("evidence shown %q", got)
	}
	for _, sel := range []string{`tr[data-type="termination"]`, `tr[data-type="tool_call"]`, `tr[data-type="model_call"]`, `tr[data-type="transition"]`} {
		if string(b.eval(`document.querySelectorAll("#timeline tbody `+strings.ReplaceAll(sel, `"`, `\"`)+`").length > 0`)) != "true" {
			t.Errorf("timeline has no %s row", sel)
		}
	}
	if got := b.text(`#timeline tbody tr[data-type="termination"]`); !strings.Contains(got, "loop_detected") {
		t.Errorf("termination row %q", got)
	}
	if string(b.eval(`document.querySelectorAll("#state-bar .bar-deciding").length > 0 && document.querySelectorAll("#state-bar .bar-executing_tools").length > 0`)) != "true" {
		t.Error("the state bar does not show the states")
	}
	if string(b.eval(`document.querySelector("#btn-cancel").disabled && !document.querySelector("#resume-box").hidden`)) != "true" {
		t.Error("an ended, recoverable run should offer resume, not cancel")
	}
	save(t, dir, "ui-run-terminated.png", b.screenshot())

	// Cancel a waiting run with its button.
	b.navigate(base + "#/runs/r-ui-active")
	b.waitFor("the waiting run", `document.querySelector("#run-id").textContent === "r-ui-active" && !document.querySelector("#btn-cancel").disabled`)
	b.eval(`document.querySelector("#btn-cancel").click(); true`)
	b.waitFor("the cancelled run", `document.querySelector("#run-reason").textContent === "cancelled"`)
	save(t, dir, "ui-run-cancelled.png", b.screenshot())
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }

func save(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	if len(png) < 1000 {
		t.Errorf("%s: screenshot of %d bytes", name, len(png))
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}
