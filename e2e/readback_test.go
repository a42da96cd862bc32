package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/runstate"
)

// readBackModel is a model that reads a cut tool output back: on its
// first call it asks for the agent's read_page; once the history holds a
// cut output and the request offers the gateway's read tool, it asks for
// the slice around the middle of the full text; once that slice is in the
// history, it answers with the line it found there.
type readBackModel struct {
	mu    sync.Mutex
	calls int
}

const readBackFound = "Found: MIDDLE-MARKER the one line that matters"

func (m *readBackModel) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	m.mu.Lock()
	m.calls++
	n := m.calls
	m.mu.Unlock()
	stream := gjson.GetBytes(body, "stream").Bool()
	includeUsage := gjson.GetBytes(body, "stream_options.include_usage").Bool()
	final, tool, args := false, "read_page", `{"page":1}`
	h := handleInText.FindSubmatch(body)
	switch {
	case strings.Contains(string(body), "MIDDLE-MARKER"):
		final = true
	case h != nil && strings.Contains(string(body), `"name":"`+pipeline.ReadBlobTool+`"`):
		// The marker's line starts where the first half of the text ends.
		half := len(bigToolOutput()) / 2
		tool, args = pipeline.ReadBlobTool, fmt.Sprintf(`{"handle":%q,"offset":%d,"length":200}`, h[1], half-100)
	}
	switch r.URL.Path {
	case "/v1/messages":
		anthropicToolAnswer(w, stream, n, final, readBackFound, tool, args, 300, 20)
		return
	case "/v1/responses":
		responsesToolAnswer(w, stream, n, final, readBackFound, tool, args, 300, 20)
		return
	}
	openaiToolAnswer(w, stream, includeUsage, n, final, readBackFound, tool, args, 300, 20)
}

// A model that asks for the middle of a cut output through the gateway's
// read tool gets it from the gateway, within the agent's request: the
// agent's loop sees its own tool and the final answer only, and the run's
// record counts the gateway's round as a model call, with its cost, and
// not as an agent step.
func TestModelReadsCutOutputBack(t *testing.T) {
	t.Parallel()
	big := bigToolOutput()
	agents := append(slices.Clone(sdkAgents), sdkAgent{desc: "responses", responses: true}, sdkAgent{desc: "responses stream", responses: true, stream: true})
	for _, tc := range agents {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &readBackModel{}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			result := func(args string) string {
				if strings.Contains(args, "handle") {
					t.Errorf("the agent was asked for the gateway's tool: %s", args)
				}
				return big
			}
			var runID, text string
			var steps int
			switch {
			case tc.anthropic:
				runID, steps, _, text = anthropicAgentWith(t, anthropicClient(g), tc.stream, 5, result)
			case tc.responses:
				runID, steps, _, text = responsesAgent(t, openaiClient(g), tc.stream, 5, result)
			default:
				runID, steps, _, text = openaiAgentWith(t, openaiClient(g), tc.stream, 5, result)
			}
			if steps != 2 || text != readBackFound {
				t.Fatalf("the agent took %d steps and ended with %q", steps, text)
			}
			reqs := up.requests()
			if len(reqs) != 3 {
				t.Fatalf("upstream saw %d calls, want 3", len(reqs))
			}
			if offered := strings.Contains(string(reqs[0].Body), pipeline.ReadBlobTool); offered {
				t.Fatal("the read tool was offered to a request without cut output")
			}
			// The gateway's answer to its tool is the slice around the
			// middle, and only that: the rest of the full text stays out.
			last := string(reqs[2].Body)
			if !strings.Contains(last, "MIDDLE-MARKER") || !strings.Contains(last, "[characters ") || len(last) > 16<<10 {
				t.Fatalf("the read-back round forwarded %d bytes, marker %v", len(last), strings.Contains(last, "MIDDLE-MARKER"))
			}
			rec := settledRecord(t, g, runID)
			if rec.ModelCalls != 3 || rec.AgentSteps != 2 || rec.ToolCalls != 1 {
				t.Fatalf("record: %d model calls, %d steps, %d tool calls; want 3, 2, 1", rec.ModelCalls, rec.AgentSteps, rec.ToolCalls)
			}
			if rec.InputTokens != 3*300 || rec.OutputTokens != 3*20 {
				t.Fatalf("record: %d input and %d output tokens, want three calls'", rec.InputTokens, rec.OutputTokens)
			}
			var evs struct{ Events []runstate.Event }
			getJSON(t, adminURL(g)+"/api/v1/runs/"+runID+"/events", &evs)
			var calls, reads int
			var cost float64
			for _, e := range evs.Events {
				switch e.Type {
				case runstate.EventModelCall:
					calls++
					cost += e.CostUSD
				case runstate.EventReadBack:
					reads++
				}
			}
			if calls != 3 || reads != 1 || cost <= 0 || fmt.Sprintf("%.9f", cost) != fmt.Sprintf("%.9f", rec.ActualCostUSD) {
				t.Fatalf("events: %d model calls costing %v (record %v), %d read-backs", calls, cost, rec.ActualCostUSD, reads)
			}
		})
	}
}
