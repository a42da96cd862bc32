package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// knownFailing are the matrix cells that fail today, each with why. A cell
// listed here is reported, not asserted; one that passes is an error until
// it leaves the list, so the list stays true.
var knownFailing = map[string]string{}

// frameworkResult is what a framework script reports for one check: the
// facts, judged here.
type frameworkResult struct {
	Framework string `json:"framework"`
	Check     string `json:"check"`
	PromptID  string `json:"prompt_id"`
	Stream    bool   `json:"-"`       // whether the scripted model saw a streamed call
	Skipped   string `json:"skipped"` // why the framework could not run here
	Returned  bool   `json:"returned"`
	Error     string `json:"error"`
	Text      string `json:"text"`
	ToolRuns  int    `json:"tool_runs"`
	Runs      []struct {
		ID     string `json:"run_id"`
		Status string `json:"status"`
		Reason string `json:"reason"`
		Steps  int    `json:"agent_steps"`
	} `json:"runs"`
}

// The checks each framework runs (see e2e/frameworks/matrix.mjs).
const (
	checkGrouped   = "grouped"        // a 3-step tool run without run headers is one run of 3 steps
	checkMaxSteps  = "max_steps"      // X-Run-Budget: max_steps=3 ends a longer run with a final answer
	checkLoop      = "loop"           // a looping agent is stopped, the framework returns normally
	checkMaxTokens = "default_tokens" // the framework's own max_tokens under max_tokens=50000
)

// loopThreshold is the loop guard's repeat count in the default policy: an
// agent runs the looping tool no more often, streaming or not.
const loopThreshold = 3

// judge says whether a result passes its check, and what the table shows.
func (r frameworkResult) judge() (ok bool, cell string) {
	fail := func(format string, a ...any) (bool, string) { return false, "FAIL: " + fmt.Sprintf(format, a...) }
	switch {
	case r.Skipped != "":
		return true, "not run: " + r.Skipped
	case !r.Returned:
		return fail("%.120s", r.Error)
	case len(r.Runs) != 1:
		return fail("%d runs", len(r.Runs))
	}
	run := r.Runs[0]
	switch r.Check {
	case checkGrouped, checkMaxTokens:
		if run.Steps != 3 || r.ToolRuns != 2 || !strings.HasPrefix(run.Status, "completed") {
			return fail("%s (%s) after %d steps, tool ran %d×", run.Status, run.Reason, run.Steps, r.ToolRuns)
		}
		return true, "pass"
	case checkMaxSteps:
		if run.Steps > 3 || r.Text == "" {
			return fail("%d steps, answer %q", run.Steps, r.Text)
		}
		return true, fmt.Sprintf("pass (%s, %d steps)", run.Reason, run.Steps)
	case checkLoop:
		if run.Reason != "loop_detected" {
			return fail("ended %s/%s", run.Status, run.Reason)
		}
		streamed := ""
		if r.Stream {
			streamed = ", streamed"
		}
		if r.ToolRuns > loopThreshold {
			return fail("tool ran %d×%s", r.ToolRuns, streamed)
		}
		return true, fmt.Sprintf("pass; tool ran %d×%s", r.ToolRuns, streamed)
	}
	return fail("unknown check %q", r.Check)
}

// TestFrameworkMatrix runs agent frameworks (e2e/frameworks: the Vercel AI
// SDK, LangChain JS, LlamaIndex TS, Mastra; langchaingo) against the gateway
// and a scripted model, with only their base URL changed, and prints the
// framework × check table. .ci/run installs the Node packages and sets
// HALTLINE_FRAMEWORKS=1, which makes a missing install a failure.
func TestFrameworkMatrix(t *testing.T) {
	dir, err := filepath.Abs("frameworks")
	if err != nil {
		t.Fatal(err)
	}
	required := os.Getenv("HALTLINE_FRAMEWORKS") == "1"
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if required {
			t.Fatalf("HALTLINE_FRAMEWORKS=1 but the frameworks are not installed: run npm ci in %s", dir)
		}
		t.Skip("the framework matrix needs its Node packages: (cd e2e/frameworks && npm ci) and HALTLINE_FRAMEWORKS=1; .ci/run does both")
	}
	model := &scriptedModel{}
	up := newUpstream(t, model.serve)
	g := startGateway(t, up.URL)
	env := append(os.Environ(), "HALTLINE_GATEWAY_URL="+gwURL(g), "HALTLINE_ADMIN_URL="+adminURL(g))

	var results []frameworkResult
	for _, cmd := range []struct {
		dir  string
		argv []string
	}{
		{dir, []string{"node", "matrix.mjs"}},
		{filepath.Join(dir, "langchaingo"), []string{"go", "run", "."}},
	} {
		results = append(results, runFrameworks(t, model, cmd.dir, cmd.argv, env)...)
	}
	if len(results) == 0 {
		t.Fatal("no results")
	}

	var table strings.Builder
	var frameworks []string
	cells := map[string]string{}
	for _, r := range results {
		if !slices.Contains(frameworks, r.Framework) {
			frameworks = append(frameworks, r.Framework)
		}
		key := r.Framework + "/" + r.Check
		ok, cell := r.judge()
		why, known := knownFailing[key]
		switch {
		case known && ok:
			t.Errorf("%s passes now (%s): remove it from knownFailing", key, cell)
		case known:
			cell = "known failure: " + strings.TrimPrefix(cell, "FAIL: ")
			t.Logf("%s: known failure (%s): %s", key, why, cell)
		case !ok:
			t.Errorf("%s: %s", key, cell)
		}
		cells[key] = cell
	}
	checks := []string{checkGrouped, checkMaxSteps, checkLoop, checkMaxTokens}
	fmt.Fprintf(&table, "| framework | %s |\n|---|%s\n", strings.Join(checks, " | "), strings.Repeat("---|", len(checks)))
	for _, f := range frameworks {
		row := make([]string, len(checks))
		for i, c := range checks {
			row[i] = cells[f+"/"+c]
		}
		fmt.Fprintf(&table, "| %s | %s |\n", f, strings.Join(row, " | "))
	}
	t.Logf("framework matrix:\n%s", table.String())
	if d := os.Getenv("HALTLINE_ARTIFACTS"); d != "" {
		if err := os.WriteFile(filepath.Join(d, "framework-matrix.md"), []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// runFrameworks runs one framework script and reads its results: one JSON
// object a line, after "RESULT ".
func runFrameworks(t *testing.T, model *scriptedModel, dir string, argv, env []string) []frameworkResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s in %s: %v\n%s\n%s", strings.Join(argv, " "), dir, err, out, stderr.String())
	}
	var results []frameworkResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "RESULT ")
		if !ok {
			continue
		}
		var r frameworkResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, line)
		}
		r.Stream = model.wasStreamed(r.PromptID)
		results = append(results, r)
	}
	if len(results) == 0 {
		t.Fatalf("%s reported nothing:\n%s\n%s", strings.Join(argv, " "), out, stderr.String())
	}
	return results
}
