package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/runstate"
)

// incidentModel is the runaway agent's model: the same log query again and
// again, only the timestamp moving.
func incidentModel(w http.ResponseWriter, r *http.Request, body []byte) {
	n := bytes.Count(body, []byte(`"tool_call_id"`))
	if !offersTools(body) {
		openaiAnswer(w, false, false, n+1, true, "Nothing found.", "", 100, 10)
		return
	}
	ts := time.Date(2026, 11, 30, 3, 0, n, 0, time.UTC).Format(time.RFC3339)
	args := fmt.Sprintf(`{"query":"level:error","since":%q}`, ts)
	openaiAnswer(w, false, false, n+1, false, "", args, 100, 10)
}

// agentBodies runs a non-streaming tool loop against base (the gateway, or
// the upstream directly) and returns the run id, the steps, and whether the
// last answer was final.
func shadowAgent(t *testing.T, base string, budget string, result func(args string) string, maxSteps int) (string, int) {
	t.Helper()
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("sk-x"), option.WithMaxRetries(0))
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "query", Parameters: openai.FunctionParameters{"type": "object"}})}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Find the errors.")}
	runID := ""
	for step := 1; step <= maxSteps; step++ {
		var resp *http.Response
		c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-4o-mini", Messages: msgs, Tools: tools}, option.WithHeader("X-Run-Budget", budget), option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		runID = resp.Header.Get("X-Run-Id")
		msg := c.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			return runID, step
		}
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			msgs = append(msgs, openai.ToolMessage(result(tc.Function.Arguments), tc.ID))
		}
	}
	return runID, maxSteps
}

// The same scripted runs in enforce and in shadow mode: in shadow the
// upstream receives exactly the calls it receives with no gateway at all,
// and the record names the lines, at the steps, where enforce ended the run.
func TestShadowModeRecordsWhatEnforceDoes(t *testing.T) {
	t.Parallel()
	pages := func(args string) string { return "page " + args }
	noData := func(string) string { return "no data" }
	cases := []struct {
		desc   string
		model  func() func(http.ResponseWriter, *http.Request, []byte) // a fresh model per run
		budget string
		result func(string) string
		line   string
	}{
		{"max_steps", func() func(http.ResponseWriter, *http.Request, []byte) {
			return (&toolLoop{finalAfter: 1000, in: 100, out: 10}).serve
		}, "max_steps=4", pages, runstate.ReasonMaxSteps},
		{"loop", func() func(http.ResponseWriter, *http.Request, []byte) { return incidentModel },
			"max_steps=50", noData, runstate.ReasonLoopDetected},
		{"token budget", func() func(http.ResponseWriter, *http.Request, []byte) {
			return (&toolLoop{finalAfter: 1000, in: 1000, out: 50}).serve
		}, "max_tokens=12000", pages, runstate.ReasonTokenBudget},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			const agentCap = 12
			// Enforce.
			upE := newUpstream(t, tc.model())
			gE := startGateway(t, upE.URL)
			idE, _ := shadowAgent(t, gwURL(gE), tc.budget, tc.result, agentCap)
			recE := settledRecord(t, gE, idE)
			if recE.Reason != tc.line {
				t.Fatalf("enforce ended with %q, want %q: %+v", recE.Reason, tc.line, recE)
			}
			// No gateway at all.
			upD := newUpstream(t, tc.model())
			shadowAgent(t, upD.URL, tc.budget, tc.result, agentCap)
			// Shadow; the agent's tool is not in the registry (a side
			// effect by default), and parallel calls stay allowed, so that
			// the gateway changes nothing.
			upS := newUpstream(t, tc.model())
			gS := startGateway(t, upS.URL, withPolicy(policyDir(t, `{"haltline":{"budgets":{"defaults":{"parallel_side_effects":true}},"terminations":{"enforcement":{
				"max_steps":"shadow","token_budget":"shadow","cost_budget":"shadow","loop_detected":"shadow","stalled":"shadow","deadline":"shadow"}}}}`)))
			idS, _ := shadowAgent(t, gwURL(gS), tc.budget, tc.result, agentCap)
			direct, shadowed := upD.requests(), upS.requests()
			if len(direct) != len(shadowed) {
				t.Fatalf("upstream saw %d calls in shadow, %d with no gateway", len(shadowed), len(direct))
			}
			for i := range direct {
				if !bytes.Equal(direct[i].Body, shadowed[i].Body) {
					t.Fatalf("call %d differs in shadow:\n%s\nvs\n%s", i+1, shadowed[i].Body, direct[i].Body)
				}
			}
			recS := settledRecord(t, gS, idS)
			if recS.Status == runstate.Terminated || recS.Status == runstate.CompletedWithDegradation {
				t.Fatalf("shadow ended the run: %+v", recS)
			}
			var hit *runstate.ShadowHit
			for i := range recS.WouldTerminate {
				if recS.WouldTerminate[i].Line == tc.line {
					hit = &recS.WouldTerminate[i]
				}
			}
			if hit == nil {
				t.Fatalf("no shadow hit for %s: %+v", tc.line, recS.WouldTerminate)
			}
			if hit.Step != recE.TerminatedAtStep {
				t.Fatalf("shadow hit at step %d, enforce ended at step %d", hit.Step, recE.TerminatedAtStep)
			}
		})
	}
}

// rephrasingModel is an agent that asks one search in other words every
// step and gives up after six searches.
func rephrasingModel(w http.ResponseWriter, r *http.Request, body []byte) {
	phrasings := []string{"acme corp q3 revenue", "q3 revenue acme corp", "revenue of acme corp in q3", "acme corp revenue q3", "acme q3 corp revenue", "acme corp q3 revenue figures"}
	n := bytes.Count(body, []byte(`"tool_call_id"`))
	if !offersTools(body) || n >= len(phrasings) {
		openaiAnswer(w, false, false, n+1, true, "Nothing found.", "", 100, 10)
		return
	}
	openaiAnswer(w, false, false, n+1, false, "", fmt.Sprintf(`{"query":%q}`, phrasings[n]), 100, 10)
}

// The semantic detector runs in shadow mode with no policy at all: a run
// that rephrases one search with nothing found goes on exactly as without
// the gateway, and its record names the line and the detector; a policy
// that enforces the line ends the run at that step, as a loop.
func TestShadowSemanticRepeatByDefault(t *testing.T) {
	t.Parallel()
	noResults := func(string) string { return "no results" }
	const agentCap = 12

	upD := newUpstream(t, rephrasingModel)
	_, stepsD := shadowAgent(t, upD.URL, "max_steps=50", noResults, agentCap)

	upS := newUpstream(t, rephrasingModel)
	// No termination policy at all; parallel calls of the agent's
	// unregistered (so L1) tool are left as the agent asked, so that the
	// forwarded bytes are the agent's.
	gS := startGateway(t, upS.URL, withPolicy(policyDir(t, `{"haltline":{"budgets":{"defaults":{"parallel_side_effects":true}}}}`)))
	idS, stepsS := shadowAgent(t, gwURL(gS), "max_steps=50", noResults, agentCap)
	direct, shadowed := upD.requests(), upS.requests()
	if stepsS != stepsD || len(direct) != len(shadowed) {
		t.Fatalf("shadow: %d steps, %d upstream calls; no gateway: %d steps, %d calls", stepsS, len(shadowed), stepsD, len(direct))
	}
	for i := range direct {
		if !bytes.Equal(direct[i].Body, shadowed[i].Body) {
			t.Fatalf("call %d differs in shadow:\n%s\nvs\n%s", i+1, shadowed[i].Body, direct[i].Body)
		}
	}
	recS := settledRecord(t, gS, idS)
	if recS.Status == runstate.Terminated || len(recS.WouldTerminate) != 1 {
		t.Fatalf("want a run left alone with one shadow hit: %+v", recS)
	}
	hit := recS.WouldTerminate[0]
	if hit.Line != "semantic_repeat" || hit.Detector != "semantic" || hit.Step != 4 {
		t.Fatalf("shadow hit %+v, want line semantic_repeat, detector semantic, step 4", hit)
	}
	t.Logf("would_terminate: %+v", hit)

	upE := newUpstream(t, rephrasingModel)
	gE := startGateway(t, upE.URL, withPolicy(policyDir(t, `{"haltline":{"terminations":{"enforcement":{"semantic_repeat":"enforce"}}}}`)))
	idE, _ := shadowAgent(t, gwURL(gE), "max_steps=50", noResults, agentCap)
	recE := settledRecord(t, gE, idE)
	if recE.Reason != runstate.ReasonLoopDetected || recE.Detector != "semantic" || recE.TerminatedAtStep != hit.Step {
		t.Fatalf("enforced: reason %q detector %q at step %d, want loop_detected/semantic at step %d", recE.Reason, recE.Detector, recE.TerminatedAtStep, hit.Step)
	}
}
