package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/demo"
)

const cliToken = "cli-test-admin-token"

// liveGateway starts the gateway with the demo's scripted model and an
// admin token, and drives the demo agents through it: a completed run, a
// loop the guard stops, and a run wrapped up at its step limit.
func liveGateway(t *testing.T) (*Gateway, string) {
	t.Helper()
	model := httptest.NewServer(&demo.Model{})
	t.Cleanup(model.Close)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL, cfg.Providers.Anthropic.BaseURL = model.URL, model.URL
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	cfg.Admin.Token = cliToken
	g := startGateway(t, cfg)
	admin := "http://" + g.AdminAddr
	// demo.Run prints the records, which needs the token: it has none, so
	// drive the agents and ignore its record printing.
	for _, a := range demo.Agents {
		_ = demo.Run(t.Context(), io.Discard, "http://"+g.DataAddr, admin, []demo.Agent{a})
	}
	// And a run left waiting for its tool results, to cancel and resume.
	req, _ := http.NewRequest("POST", "http://"+g.DataAddr+"/v1/chat/completions", strings.NewReader(
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Check order 1234."}],`+
			`"tools":[{"type":"function","function":{"name":"lookup_order","parameters":{"type":"object"}}}]}`))
	req.Header.Set("Authorization", "Bearer sk-agent")
	req.Header.Set("X-Run-Id", "r-cli-active")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return g, admin
}

// startGateway starts the gateway on cfg, closed with the test.
func startGateway(t *testing.T, cfg config.Config) *Gateway {
	t.Helper()
	g, err := Start(context.Background(), cfg, nil)
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

// gateway runs … through Main, as a user types it.
func runCLI(t *testing.T, token string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "HALTLINE_ADMIN_TOKEN" {
			return token
		}
		return ""
	}
	err := Main(t.Context(), append([]string{"runs"}, args...), &out, &errOut, getenv)
	return out.String(), err
}

// runIDs lists the runs (JSON) by status.
func runIDs(t *testing.T, admin string) map[string]string {
	t.Helper()
	out, err := runCLI(t, cliToken, "list", "--admin", admin, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Runs []struct {
			ID     string `json:"run_id"`
			Status string `json:"status"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	ids := map[string]string{}
	for _, r := range l.Runs {
		ids[r.Status] = r.ID
	}
	return ids
}

func TestRunsCLI(t *testing.T) {
	t.Parallel()
	_, admin := liveGateway(t)
	ids := runIDs(t, admin)
	loopID, doneID := ids["terminated"], ids["completed"]
	if loopID == "" || doneID == "" || ids["completed_with_degradation"] == "" || ids["executing_tools"] != "r-cli-active" {
		t.Fatalf("runs by status: %v", ids)
	}

	for _, tc := range []struct {
		desc    string
		token   string
		args    []string
		want    []string // each must appear
		notWant []string
		wantErr string
	}{
		{desc: "list table", args: []string{"list"},
			want: []string{"RUN", "STATUS", "REASON", "COST USD", loopID, doneID, "loop_detected", "r-cli-active", "4 run(s)"}},
		{desc: "list by status", args: []string{"list", "--status", "terminated"},
			want: []string{loopID, "loop_detected", "1 run(s)"}, notWant: []string{doneID}},
		{desc: "list by reason", args: []string{"list", "--reason", "completed"},
			want: []string{doneID, "1 run(s)"}, notWant: []string{loopID}},
		{desc: "list by tenant", args: []string{"list", "--tenant", "no-such-tenant"},
			want: []string{"0 run(s)"}, notWant: []string{loopID}},
		{desc: "list by time", args: []string{"list", "--since", "1h"}, want: []string{loopID, doneID, "4 run(s)"}},
		{desc: "list limit", args: []string{"list", "--limit", "1"}, want: []string{"1 run(s)"}},
		{desc: "list as JSON", args: []string{"list", "--json", "--reason", "loop_detected"},
			want: []string{`"run_id": "` + loopID + `"`, `"count": 1`}},
		{desc: "show", args: []string{"show", loopID},
			want: []string{"reason", "loop_detected", "detector", "last_action", "query_logs", "recoverable", "resume_token", "reserved_worst_case_usd"}},
		{desc: "show as JSON", args: []string{"show", "--json", loopID}, want: []string{`"resume_token"`, `"status": "terminated"`}},
		{desc: "events", args: []string{"events", loopID},
			want: []string{"SEQ", "transition", "deciding → executing_tools", "tool_call", "query_logs args=", "model_call", "termination", "loop_detected"}},
		{desc: "show unknown run", args: []string{"show", "r-nope"}, wantErr: "404"},
		{desc: "show without id", args: []string{"show"}, wantErr: "RUN_ID"},
		{desc: "without the token", token: "-", args: []string{"list"}, wantErr: "401"},
		{desc: "unknown verb", args: []string{"frobnicate"}, wantErr: "unknown"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			token := cliToken
			if tc.token == "-" {
				token = ""
			}
			out, err := runCLI(t, token, append([]string{tc.args[0], "--admin", admin}, tc.args[1:]...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output holds %q:\n%s", w, out)
				}
			}
		})
	}
}

// cancel then resume, in that order, on the run left waiting.
func TestRunsCLICancelResume(t *testing.T) {
	t.Parallel()
	_, admin := liveGateway(t)
	out, err := runCLI(t, cliToken, "cancel", "--admin", admin, "r-cli-active")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel output:\n%s", out)
	}
	if _, err := runCLI(t, cliToken, "cancel", "--admin", admin, "r-cli-active"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("second cancel: %v, want a 409", err)
	}
	out, err = runCLI(t, cliToken, "show", "--admin", admin, "--json", "r-cli-active")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		ResumeToken string `json:"resume_token"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.ResumeToken == "" {
		t.Fatalf("no resume token: %v\n%s", err, out)
	}
	if _, err := runCLI(t, cliToken, "resume", "--admin", admin, "--resume-token", "wrong", "r-cli-active"); err == nil {
		t.Fatal("resume with a wrong token succeeded")
	}
	out, err = runCLI(t, cliToken, "resume", "--admin", admin, "--resume-token", rec.ResumeToken, "--add-budget", "max_steps=5", "r-cli-active")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "status") || !strings.Contains(out, "ready") {
		t.Fatalf("resume output:\n%s", out)
	}
}
