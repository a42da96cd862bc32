package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/runstate"
)

// Lax records every run and lets it go: loop detectors off, no cost cap.
const laxPolicy = `{"haltline":{"recordings":{"enabled":true},
	"loops":{"defaults":{"same_in_row":0,"window":0,"window_repeats":0,"max_cycle_period":0,"stall_steps":0}},
	"budgets":{"defaults":{"max_steps":40}}}}`

// Strict is the candidate: the default loop thresholds, fewer steps, a
// cost cap.
const strictPolicy = `{"haltline":{"budgets":{"defaults":{"max_steps":12,"max_cost_usd":0.02}}}}`

// runCLI runs the gateway's command line in-process.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := app.Main(context.Background(), args, &out, &errOut, func(string) string { return "" }); err != nil {
		t.Fatalf("gateway %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// endStep is where a live run ended: its termination step, else its last.
func endStep(rec runstate.Record) int64 {
	if rec.TerminatedAtStep > 0 {
		return rec.TerminatedAtStep
	}
	return rec.AgentSteps
}

// Two runs recorded under a lax policy — the incident loop (same query,
// timestamp moving, "no data") and a budget-heavy run — replayed under a
// strict one: the report names where each would have stopped and why, and
// that is where the same runs stop live under the strict policy.
func TestReplayMatchesLiveUnderStrictPolicy(t *testing.T) {
	t.Parallel()
	noData := func(string) string { return "no data" }
	pages := func(args string) string { return "page " + args }
	heavy := func() func(http.ResponseWriter, *http.Request, []byte) {
		return (&toolLoop{finalAfter: 8, in: 20000, out: 500}).serve
	}
	incident := func() func(http.ResponseWriter, *http.Request, []byte) { return incidentModel }
	cases := []struct {
		desc   string
		model  func() func(http.ResponseWriter, *http.Request, []byte)
		result func(string) string
		reason string
	}{
		{"incident loop", incident, noData, runstate.ReasonLoopDetected},
		{"budget-heavy", heavy, pages, runstate.ReasonCostBudget},
	}
	const agentCap = 10

	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			// Record under the lax policy.
			up := newUpstream(t, tc.model())
			lax := startGateway(t, up.URL, withPolicy(policyDir(t, laxPolicy)))
			id, _ := shadowAgent(t, gwURL(lax), "max_steps=40", tc.result, agentCap)
			rec := settledRecord(t, lax, id)
			if rec.Status == runstate.Terminated {
				t.Fatalf("%s: the lax policy ended the run: %+v", tc.desc, rec)
			}
			// Export through the CLI and the control plane.
			file := filepath.Join(t.TempDir(), "rec.jsonl")
			runCLI(t, "runs", "export", "--admin", adminURL(lax), "--since", "1h", "--out", file)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(b, []byte("\n")); n != 1 {
				t.Fatalf("%s: export holds %d lines, want 1:\n%s", tc.desc, n, b)
			}
			var r pipeline.Recording
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.RunID != id || len(r.Calls) != int(rec.ModelCalls) {
				t.Fatalf("%s: recording of %s with %d calls, run %s made %d", tc.desc, r.RunID, len(r.Calls), id, rec.ModelCalls)
			}

			// Replay offline under the strict policy.
			strictDir := policyDir(t, strictPolicy)
			var rep pipeline.ReplayReport
			if err := json.Unmarshal([]byte(runCLI(t, "replay", "--policy-dir", strictDir, "--json", file)), &rep); err != nil {
				t.Fatal(err)
			}
			got := rep.Runs[0]
			if got.Error != "" || got.Replayed.Reason != tc.reason || !got.Changed {
				t.Fatalf("%s: replay: %+v", tc.desc, got)
			}
			if got.Replayed.Step >= got.Recorded.Step || got.SavedUSD <= 0 {
				t.Fatalf("%s: replay should end earlier and save spend: %+v", tc.desc, got)
			}
			// The control plane's replay of the runs it holds agrees.
			var data map[string]any
			_ = json.Unmarshal([]byte(strictPolicy), &data)
			body, _ := json.Marshal(map[string]any{"data": data, "run_ids": []string{id}})
			resp, err := http.Post(adminURL(lax)+"/api/v1/replay", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			rb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var cp pipeline.ReplayReport
			if err := json.Unmarshal(rb, &cp); err != nil || len(cp.Runs) != 1 {
				t.Fatalf("%s: POST /api/v1/replay: %d %s", tc.desc, resp.StatusCode, rb)
			}
			if c := cp.Runs[0]; c.Replayed.Reason != got.Replayed.Reason || c.Replayed.Step != got.Replayed.Step {
				t.Fatalf("%s: control plane replay %+v, offline %+v", tc.desc, c.Replayed, got.Replayed)
			}

			// The same agent live under the strict policy stops where the replay said.
			upS := newUpstream(t, tc.model())
			strict := startGateway(t, upS.URL, withPolicy(strictDir))
			idS, _ := shadowAgent(t, gwURL(strict), "max_steps=40", tc.result, agentCap)
			live := settledRecord(t, strict, idS)
			if live.Reason != got.Replayed.Reason || endStep(live) != got.Replayed.Step || string(live.Status) != got.Replayed.Status {
				t.Fatalf("%s: live under the strict policy ended %s/%s at step %d; replay said %s/%s at step %d",
					tc.desc, live.Status, live.Reason, endStep(live), got.Replayed.Status, got.Replayed.Reason, got.Replayed.Step)
			}
			if live.ModelCalls != got.Replayed.ModelCalls {
				t.Fatalf("%s: live made %d model calls, replay %d", tc.desc, live.ModelCalls, got.Replayed.ModelCalls)
			}
			t.Logf("%s: recorded %s@%d $%.6f → replayed %s@%d $%.6f (live %s@%d $%.6f), saved $%.6f", tc.desc,
				dashed(got.Recorded.Reason, got.Recorded.Status), got.Recorded.Step, got.Recorded.CostUSD,
				got.Replayed.Reason, got.Replayed.Step, got.Replayed.CostUSD, live.Reason, endStep(live), live.ActualCostUSD, got.SavedUSD)
		})
	}
}

func dashed(reason, status string) string {
	if reason != "" {
		return reason
	}
	return status
}

// markerModel asks for a tool with the marker in its arguments, then answers.
func markerModel(marker string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		n := bytes.Count(body, []byte(`"tool_call_id"`))
		if n >= 1 {
			openaiAnswer(w, false, false, n+1, true, "done", "", 100, 10)
			return
		}
		openaiAnswer(w, false, false, n+1, false, "", fmt.Sprintf(`{"query":%q}`, marker), 100, 10)
	}
}

// Recordings keep prompts, tool arguments and tool results as hashes and
// sizes, unless content recording is on for the tenant.
func TestRecordingKeepsContentOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	const marker = "MARKER-zebra-7731"
	cases := []struct {
		desc    string
		content bool
	}{
		{"hashes only", false},
		{"content on", true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, markerModel(marker))
			g := startGateway(t, up.URL, withPolicy(policyDir(t, fmt.Sprintf(
				`{"haltline":{"recordings":{"enabled":true,"content":%t}}}`, tc.content))))
			client := openaiClient(g)
			id, _, _, _ := openaiAgentWith(t, client, false, 4, func(args string) string { return "result for " + marker })
			_ = settledRecord(t, g, id)
			// The prompt itself carries the marker too.
			resp, _ := spPost(t, g, "/v1/chat/completions", nil, []byte(fmt.Sprintf(
				`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"find %s"}]}`, marker)))
			if resp.StatusCode != 200 {
				t.Fatalf("prompt call: %d", resp.StatusCode)
			}
			file := filepath.Join(t.TempDir(), "rec.jsonl")
			runCLI(t, "runs", "export", "--admin", adminURL(g), "--out", file)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(b, []byte("\n")); n != 2 {
				t.Fatalf("export holds %d runs, want 2", n)
			}
			// JSON escapes nothing in the marker, so a plain search finds it
			// in a body, an argument or a result.
			has := bytes.Contains(b, []byte(marker))
			if has != tc.content {
				t.Fatalf("content=%t, yet the export contains the marker: %t\n%s", tc.content, has, b)
			}
			var r pipeline.Recording
			if err := json.Unmarshal(b[:bytes.IndexByte(b, '\n')], &r); err != nil {
				t.Fatal(err)
			}
			if r.Calls[0].BodyBytes == 0 || r.Calls[0].BodySHA256 == "" || len(r.Calls[0].ToolCalls) != 1 ||
				r.Calls[0].ToolCalls[0].Fingerprint == "" || len(r.Calls[1].Observations) != 1 {
				t.Fatalf("recording lacks shapes or hashes: %+v", r.Calls)
			}
		})
	}
}
