package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/runstate"
)

// incident is the runaway agent's model in both formats: the same log query
// again and again, only its timestamp suffix moving.
func incident(w http.ResponseWriter, r *http.Request, body []byte) {
	stream, includeUsage := streamFlags(body)
	n := bytes.Count(body, []byte(`"tool_call_id"`)) + bytes.Count(body, []byte(`"tool_use_id"`))
	final := !offersTools(body)
	ts := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC).Add(time.Duration(n) * 17 * time.Second).Format(time.RFC3339)
	args := fmt.Sprintf(`{"query":"level:error service:checkout","since":%q}`, ts)
	if r.URL.Path == "/v1/messages" {
		anthropicAnswer(w, stream, n+1, final, "Nothing found.", args, 300, 20)
		return
	}
	openaiAnswer(w, stream, includeUsage, n+1, final, "Nothing found.", args, 300, 20)
}

// The incident agent is stopped within 5 steps, receives a normal final
// answer, and the record says why — with openai-go (stream and not) and
// anthropic-sdk-go (stream and not). The agent's own tool always answers
// "no data".
func TestLoopGuardStopsTheIncident(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		stream    bool
		anthropic bool
	}{
		{"openai", false, false}, {"openai stream", true, false},
		{"anthropic", false, true}, {"anthropic stream", true, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, incident)
			g := startGateway(t, up.URL)
			var runID, finish, text string
			var steps int
			if tc.anthropic {
				runID, steps, finish, text = anthropicAgentWith(t, anthropicClient(g), tc.stream, 30, func(string) string { return "no data" })
			} else {
				runID, steps, finish, text = openaiAgentWith(t, openaiClient(g), tc.stream, 30, func(string) string { return "no data" })
			}
			if steps > 5 {
				t.Fatalf("the agent ran %d steps", steps)
			}
			if (finish != "stop" && finish != "end_turn") || !strings.Contains(text, "repeating") {
				t.Fatalf("finish %q text %q", finish, text)
			}
			rec := settledRecord(t, g, runID)
			if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonLoopDetected || rec.Detector == "" || len(rec.Evidence) == 0 {
				t.Fatalf("record %+v", rec)
			}
			if rec.LastAction == nil || rec.LastAction.Tool != "read_page" {
				t.Fatalf("last action %+v", rec.LastAction)
			}
			t.Logf("stopped after %d agent steps (%d upstream calls): %s at step %d by %s", steps, len(up.requests()), rec.Reason, rec.TerminatedAtStep, rec.Detector)
		})
	}
}
