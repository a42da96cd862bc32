package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/haltline/haltline/runstate"
)

// A looping agent is stopped at the same step whether it streams or not, in
// every API: its tool runs exactly as often as the loop threshold (three
// identical calls), the fourth answer is the final answer (the held tool
// call replaced in the same stream), the SDK's loop ends normally, and the
// record counts the tool calls the agent received, with the withheld one
// as an event of its own.
func TestLoopStoppedAtTheSameStepStreamedOrNot(t *testing.T) {
	t.Parallel()
	for _, api := range []string{"openai chat", "openai responses", "anthropic"} {
		for _, stream := range []bool{false, true} {
			desc := api
			if stream {
				desc += " stream"
			}
			t.Run(desc, func(t *testing.T) {
				t.Parallel()
				handler := incident
				if api == "openai responses" {
					handler = responsesIncident
				}
				up := newUpstream(t, handler)
				g := startGateway(t, up.URL)
				ran := 0
				tool := func(string) string { ran++; return "no data" }
				var runID, finish, text string
				switch api {
				case "openai chat":
					runID, _, finish, text = openaiAgentWith(t, openaiClient(g), stream, 30, tool)
				case "openai responses":
					runID, _, finish, text = responsesAgent(t, openaiClient(g), stream, 30, tool)
				default:
					runID, _, finish, text = anthropicAgentWith(t, anthropicClient(g), stream, 30, tool)
				}
				if ran != 3 {
					t.Fatalf("the tool ran %d times, want 3", ran)
				}
				if (finish != "stop" && finish != "end_turn" && finish != "completed") || !strings.Contains(text, "repeating") {
					t.Fatalf("finish %q text %q", finish, text)
				}
				if n := len(up.requests()); n != 4 {
					t.Fatalf("upstream saw %d calls, want 4", n)
				}
				rec := settledRecord(t, g, runID)
				if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonLoopDetected || rec.TerminatedAtStep != 4 {
					t.Fatalf("record %+v", rec)
				}
				if rec.ToolCalls != int64(ran) || rec.AgentSteps != 4 || rec.ModelCalls != 4 {
					t.Fatalf("tool_calls %d (agent received %d), steps %d, model calls %d", rec.ToolCalls, ran, rec.AgentSteps, rec.ModelCalls)
				}
				var events struct {
					Events []runstate.Event `json:"events"`
				}
				getJSON(t, adminURL(g)+"/api/v1/runs/"+runID+"/events", &events)
				calls, withheld := 0, 0
				for _, e := range events.Events {
					switch e.Type {
					case runstate.EventToolCall:
						calls++
					case runstate.EventToolWithheld:
						withheld++
						if e.ArgumentsHash == "" || !strings.Contains(e.Detail, rec.Detector) {
							t.Fatalf("withheld event %+v", e)
						}
					}
				}
				if calls != 3 || withheld != 1 {
					t.Fatalf("%d tool_call and %d tool_withheld events", calls, withheld)
				}
			})
		}
	}
}

// responsesIncident is the incident's model in the Responses format: a
// short text, then the same log query again and again, only its timestamp
// suffix moving; the streamed answer cuts the call's arguments in pieces.
func responsesIncident(w http.ResponseWriter, r *http.Request, body []byte) {
	n := bytes.Count(body, []byte(`"function_call_output"`))
	stream := bytes.Contains(body, []byte(`"stream":true`))
	usage := `{"input_tokens":300,"input_tokens_details":{"cached_tokens":0},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":320}`
	id, callID := fmt.Sprintf("resp_loop%d", n+1), fmt.Sprintf("call_loop_%d", n+1)
	args := fmt.Sprintf(`{"query":"level:error service:checkout","since":"2026-11-30T03:00:%02dZ"}`, n*17%60)
	msg := fmt.Sprintf(`{"id":"msg_loop%d","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]}`, n+1)
	call := fmt.Sprintf(`{"id":"fc_loop%d","type":"function_call","status":"completed","call_id":%q,"name":"read_page","arguments":%q}`, n+1, callID, args)
	resp := func(status, output, usage string) string {
		return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"status":%q,"model":"gpt-5.5","output":[%s],"usage":%s}`, id, status, output, usage)
	}
	if !stream {
		writeJSON(w, 200, []byte(resp("completed", msg+","+call, usage)))
		return
	}
	var b strings.Builder
	seq := 0
	ev := func(typ, rest string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, rest)
		seq++
	}
	ev("response.created", `"response":`+resp("in_progress", "", "null"))
	ev("response.output_item.added", fmt.Sprintf(`"output_index":0,"item":{"id":"msg_loop%d","type":"message","status":"in_progress","role":"assistant","content":[]}`, n+1))
	ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_loop%d","output_index":0,"content_index":0,"delta":"Checking."`, n+1))
	ev("response.output_item.done", `"output_index":0,"item":`+msg)
	ev("response.output_item.added", fmt.Sprintf(`"output_index":1,"item":{"id":"fc_loop%d","type":"function_call","status":"in_progress","call_id":%q,"name":"read_page","arguments":""}`, n+1, callID))
	for i := 0; i < len(args); i += 9 {
		ev("response.function_call_arguments.delta", fmt.Sprintf(`"item_id":"fc_loop%d","output_index":1,"delta":%q`, n+1, args[i:min(i+9, len(args))]))
	}
	ev("response.function_call_arguments.done", fmt.Sprintf(`"item_id":"fc_loop%d","output_index":1,"arguments":%q`, n+1, args))
	ev("response.output_item.done", `"output_index":1,"item":`+call)
	ev("response.completed", `"response":`+resp("completed", msg+","+call, usage))
	writeSSE(w, []byte(b.String()))
}

// responsesAgent runs a tool loop with openai-go's Responses API, sending
// the whole history back each time, until an answer asks for no tool or
// maxSteps; it returns the run id, steps taken, the last status and text.
func responsesAgent(t *testing.T, client openai.Client, stream bool, maxSteps int, result func(args string) string) (runID string, steps int, status, text string) {
	t.Helper()
	ctx := context.Background()
	input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Find the checkout errors.", responses.EasyInputMessageRoleUser)}
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "read_page",
		Parameters: map[string]any{"type": "object"}}}}
	for steps < maxSteps {
		var resp *http.Response
		params := responses.ResponseNewParams{Model: "gpt-5.5", Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}}
		var r responses.Response
		if stream {
			s := client.Responses.NewStreaming(ctx, params, option.WithResponseInto(&resp))
			for s.Next() {
				if ev := s.Current(); ev.Type == "response.completed" {
					r = ev.Response
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("step %d: %v", steps+1, err)
			}
		} else {
			got, err := client.Responses.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatalf("step %d: %v", steps+1, err)
			}
			r = *got
		}
		steps++
		runID = resp.Header.Get("X-Run-Id")
		called := false
		for _, o := range r.Output {
			if o.Type != "function_call" {
				continue
			}
			called = true
			out := responses.ResponseInputItemParamOfFunctionCallOutput(result(o.Arguments.OfString))
			out.OfFunctionCallOutput.CallID = openai.String(o.CallID)
			input = append(input, responses.ResponseInputItemParamOfFunctionCall(o.Arguments.OfString, o.CallID, o.Name), out)
		}
		if !called {
			return runID, steps, string(r.Status), r.OutputText()
		}
	}
	return runID, steps, "", ""
}
