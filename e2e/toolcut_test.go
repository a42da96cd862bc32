package e2e

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/runstate"
)

// bigToolOutput is what an agent's own log reader returns: 204,800
// characters, with a line in its middle that only the full text holds.
func bigToolOutput() string {
	line := "2026-12-06 03:00:17 checkout error: upstream timeout after 30s\n"
	half := strings.Repeat(line, 1600)
	return half + "MIDDLE-MARKER the one line that matters\n" + half
}

type sdkAgent struct {
	desc                         string
	anthropic, responses, stream bool
}

// sdkAgents are the agents of the cut tests: each official SDK's, its
// model's answers streamed or not.
var sdkAgents = []sdkAgent{{desc: "chat"}, {desc: "chat stream", stream: true},
	{desc: "anthropic", anthropic: true}, {desc: "anthropic stream", anthropic: true, stream: true}}

var handleInText = regexp.MustCompile(`handle (b-[0-9a-z]+)`)

// An agent's own long tool output is cut before it reaches the model, on
// the call that carries it and on every later one, into the same text:
// the forwarded history before the newest message stays byte-identical, so
// prompt caches keep hitting. The full text is kept behind the handle the
// cut names. With the policy off for that tool, it goes through whole.
func TestLongToolOutputCutInEveryRequest(t *testing.T) {
	t.Parallel()
	big := bigToolOutput()
	for _, tc := range sdkAgents {
		for _, policyOff := range []bool{false, true} {
			desc := tc.desc
			if policyOff {
				desc += " policy off"
			}
			t.Run(desc, func(t *testing.T) {
				t.Parallel()
				m := &toolLoop{finalAfter: 3, in: 300, out: 20}
				up := newUpstream(t, m.serve)
				data := `{"haltline":{}}`
				if policyOff {
					data = `{"haltline":{"budgets":{"defaults":{"tool_output":{"tools":{"read_page":{"cut":false}}}}}}}`
				}
				g := startGateway(t, up.URL, withPolicy(policyDir(t, data)))
				result := func(args string) string {
					if strings.Contains(args, `"page":1`) {
						return big
					}
					return "page text " + args
				}
				var runID string
				if tc.anthropic {
					runID, _, _, _ = anthropicAgentWith(t, anthropicClient(g), tc.stream, 5, result)
				} else {
					runID, _, _, _ = openaiAgentWith(t, openaiClient(g), tc.stream, 5, result)
				}
				reqs := up.requests()
				if len(reqs) != 4 {
					t.Fatalf("upstream saw %d calls, want 4", len(reqs))
				}
				if policyOff {
					for _, r := range reqs[1:] {
						if !strings.Contains(string(r.Body), "MIDDLE-MARKER") {
							t.Fatal("with the cut off for read_page, its output was cut")
						}
					}
					return
				}
				var handle string
				for i, r := range reqs[1:] {
					body := string(r.Body)
					if strings.Contains(body, "MIDDLE-MARKER") || len(body) > 16<<10 {
						t.Fatalf("call %d forwarded %d bytes, the middle included: %v", i+2, len(body), strings.Contains(body, "MIDDLE-MARKER"))
					}
					h := handleInText.FindStringSubmatch(body)
					if h == nil || (handle != "" && h[1] != handle) {
						t.Fatalf("call %d names handle %v, want %q", i+2, h, handle)
					}
					handle = h[1]
				}
				if n := prefixBreaks(reqs[1:]); n != 0 {
					t.Fatalf("the forwarded prefix changed %d times after the cut", n)
				}
				// The full text stays behind the handle.
				resp, err := http.Get(adminURL(g) + "/api/v1/runs/" + runID + "/blobs/" + handle)
				if err != nil {
					t.Fatal(err)
				}
				full, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(full) != big {
					t.Fatalf("blob %s: %d bytes of %d", handle, len(full), len(big))
				}
				cuts := toolOutputCuts(t, g, runID)
				if len(cuts) != 1 || !strings.Contains(cuts[0], "read_page") || !strings.Contains(cuts[0], handle) {
					t.Fatalf("the run's cut events: %q", cuts)
				}
			})
		}
	}
}

// toolOutputCuts are the details of a run's tool_output_cut events.
func toolOutputCuts(t *testing.T, g *app.Gateway, runID string) []string {
	t.Helper()
	var evs struct{ Events []runstate.Event }
	getJSON(t, adminURL(g)+"/api/v1/runs/"+runID+"/events", &evs)
	var out []string
	for _, e := range evs.Events {
		if e.Type == runstate.EventToolOutputCut {
			out = append(out, e.Detail)
		}
	}
	return out
}

func callOutput(callID, output string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
		CallID: openai.String(callID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(output)}}}
}

// The Responses API's function_call_output is cut the same way, streamed or
// not.
func TestLongToolOutputCutResponses(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			fixture := "openai-responses/response-function-call-reasoning.json"
			if stream {
				fixture = "openai-responses/stream-function-call.sse"
			}
			up := newUpstream(t, spServeFixture(t, fixture))
			g := startGateway(t, up.URL)
			big := bigToolOutput()
			input := responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("Read yesterday's checkout logs.", responses.EasyInputMessageRoleUser),
				responses.ResponseInputItemParamOfFunctionCall(`{"day":"2026-12-05"}`, "call_logs_1", "read_logs"),
				callOutput("call_logs_1", big),
			}
			client := openaiClient(g)
			for step := range 2 {
				if step == 1 {
					input = append(input,
						responses.ResponseInputItemParamOfFunctionCall(`{}`, "call_metrics_1", "get_metrics"),
						callOutput("call_metrics_1", "p99 4.2s"))
				}
				params := responses.ResponseNewParams{Model: "gpt-5.5", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}}
				run := option.WithHeader("X-Run-Id", "r-responses-cut")
				if stream {
					s := client.Responses.NewStreaming(context.Background(), params, run)
					for s.Next() {
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
				} else if _, err := client.Responses.New(context.Background(), params, run); err != nil {
					t.Fatal(err)
				}
			}
			reqs := up.requests()
			if len(reqs) != 2 {
				t.Fatalf("upstream saw %d calls", len(reqs))
			}
			first, second := gjson.GetBytes(reqs[0].Body, "input").Raw, gjson.GetBytes(reqs[1].Body, "input").Raw
			for _, in := range []string{first, second} {
				if strings.Contains(in, "MIDDLE-MARKER") || len(in) > 8<<10 || !handleInText.MatchString(in) {
					t.Fatalf("forwarded input of %d bytes, cut: %v", len(in), !strings.Contains(in, "MIDDLE-MARKER"))
				}
			}
			if !strings.HasPrefix(second, first[:len(first)-1]) {
				t.Fatal("the second call's input does not start with the first's")
			}
		})
	}
}
