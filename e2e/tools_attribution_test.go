package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/runstate"
)

// tlModelCallsTool is a fake OpenAI upstream whose answer asks for one
// tool call.
func tlModelCallsTool(t *testing.T, tool, args string) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, fmt.Appendf(nil, `{"id":"chatcmpl-tl","object":"chat.completion","created":1,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_tl_1","type":"function",`+
			`"function":{"name":%q,"arguments":%q}}]},"finish_reason":"tool_calls","logprobs":null}],`+
			`"usage":{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30}}`, tool, args))
	})
}

func tlAsk(t *testing.T, client openai.Client) (*openai.ChatCompletion, string) {
	t.Helper()
	var resp *http.Response
	c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the file.")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name: "read", Parameters: openai.FunctionParameters{"type": "object"}})},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	return c, resp.Header.Get("X-Run-Id")
}

// A tool call made after a model call, with no run headers, belongs to
// the run whose outstanding tool call has the same name and arguments.
func TestToolAttributionAfterModelCall(t *testing.T) {
	c := newTLCounter()
	srv := tlMCPServer(t, c, false)
	up := tlModelCallsTool(t, "read", `{"path": "attr.txt"}`)
	gw := tlMCPGateway(t, srv.URL, up.URL)
	_, runID := tlAsk(t, openaiClient(gw))
	if runID == "" {
		t.Fatal("no X-Run-Id on the model answer")
	}
	// No run headers at all; the same credential as the model call, which
	// names the tenant whose runs the call may be matched to.
	cs := tlConnect(t, gw, "fs", map[string]string{"Authorization": "Bearer sk-agent-test"})
	// The framework sends the arguments its own way: key order and spacing differ.
	res := tlCall(t, cs, "read", map[string]any{"path": "attr.txt"})
	if res.IsError || c.count("read") != 1 {
		t.Fatalf("tool call: %q", tlText(res))
	}
	rec := runRecord(t, gw, runID)
	if rec.ToolAttempts != 1 || rec.ToolCalls != 1 || rec.ModelCalls != 1 {
		t.Fatalf("run %s: tool_attempts %d tool_calls %d model_calls %d, want 1/1/1", runID, rec.ToolAttempts, rec.ToolCalls, rec.ModelCalls)
	}
	// An unrelated call starts a run of its own.
	tlCall(t, cs, "read", map[string]any{"path": "other.txt"})
	if rec := runRecord(t, gw, runID); rec.ToolAttempts != 1 {
		t.Fatalf("an unrelated call was attributed to %s", runID)
	}
}

// A denied tool call in a model response ends the run policy_denied, and
// the non-streamed answer is replaced by the ended answer.
func TestToolDeniedInModelResponse(t *testing.T) {
	c := newTLCounter()
	srv := tlMCPServer(t, c, false)
	up := tlModelCallsTool(t, "format_disk", `{"path":"/"}`)
	gw := tlMCPGateway(t, srv.URL, up.URL)
	comp, runID := tlAsk(t, openaiClient(gw))
	if comp.Choices[0].FinishReason != "stop" || len(comp.Choices[0].Message.ToolCalls) != 0 ||
		!strings.Contains(comp.Choices[0].Message.Content, "policy") {
		t.Fatalf("answer not replaced: %+v", comp.Choices[0])
	}
	rec := runRecord(t, gw, runID)
	if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonPolicyDenied {
		t.Fatalf("run %s/%s, want terminated/policy_denied", rec.Status, rec.Reason)
	}
	// The framework runs it anyway through the gateway: refused, never executed.
	cs := tlConnect(t, gw, "fs", nil)
	res := tlCall(t, cs, "format_disk", map[string]any{"path": "/"})
	if !res.IsError || c.count("format_disk") != 0 {
		t.Fatalf("denied call executed: %q", tlText(res))
	}
}
