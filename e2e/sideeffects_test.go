package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/runstate"
)

// seGateway declares "purge" (L2) and "search" (L0) as HTTP tools at url.
func seGateway(t *testing.T, modelURL, toolURL string) *appGateway {
	return startGateway(t, modelURL, func(c *config.Config) {
		c.Tools = map[string]config.HTTPTool{
			"purge":  {URL: toolURL + "/purge", Level: "L2"},
			"mutate": {URL: toolURL + "/mutate", Level: "L1"},
			"search": {URL: toolURL + "/search", Level: "L0"},
		}
	})
}

// seModel answers every API with a final text.
func seModel(w http.ResponseWriter, r *http.Request, _ []byte) {
	switch r.URL.Path {
	case "/v1/messages":
		anthropicAnswer(w, false, 1, true, "done", "", 10, 2)
	case "/v1/responses":
		responsesAnswer(w, false, 1, true, "done", "", 10, 2)
	default:
		openaiAnswer(w, false, false, 1, true, "done", "", 10, 2)
	}
}

// An L2 tool on offer reaches the upstream with parallel tool calls
// disabled, in each API; a request offering only L0 tools goes unchanged.
func TestSideEffectsSerialToolsRequested(t *testing.T) {
	up := newUpstream(t, seModel)
	g := seGateway(t, up.URL, "http://127.0.0.1:1")
	oc, ac := openaiClient(g), anthropicClient(g)
	ctx := t.Context()
	for _, tool := range []string{"purge", "search"} {
		serial := tool == "purge"
		n := len(up.requests())
		_, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("clean up")},
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name: tool, Parameters: shared.FunctionParameters{"type": "object"}})},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = oc.Responses.New(ctx, responses.ResponseNewParams{
			Model: "gpt-4o-mini",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("clean up")},
			Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
				Name: tool, Parameters: map[string]any{"type": "object"}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{
			Model: "claude-haiku-4-5", MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("clean up"))},
			Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: tool,
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		reqs := up.requests()[n:]
		if len(reqs) != 3 {
			t.Fatalf("%d upstream requests, want 3", len(reqs))
		}
		for _, r := range reqs {
			body := string(r.Body)
			var got bool
			if r.Path == "/v1/messages" {
				got = gjson.Get(body, "tool_choice.disable_parallel_tool_use").Bool()
				if serial && gjson.Get(body, "tool_choice.type").Str != "auto" {
					t.Errorf("%s: tool_choice %s", r.Path, gjson.Get(body, "tool_choice").Raw)
				}
			} else {
				pc := gjson.Get(body, "parallel_tool_calls")
				got = pc.Exists() && !pc.Bool()
			}
			if got != serial {
				t.Errorf("%s with tool %s: parallel calls disabled %t, want %t: %s", r.Path, tool, got, serial, body)
			}
		}
	}
}

// seToolServer counts the calls in flight per tool and remembers the most
// that overlapped; arrived reports each call as it comes in, and a call
// answers once release lets it (L0 calls once both have arrived).
type seToolServer struct {
	mu       sync.Mutex
	inflight map[string]int
	most     map[string]int
	order    []string
	arrived  chan string
	release  chan struct{}
	stop     chan struct{} // closed at the test's end: nothing waits on
}

func (s *seToolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	tool, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	s.inflight[tool]++
	s.most[tool] = max(s.most[tool], s.inflight[tool])
	s.order = append(s.order, string(body))
	s.mu.Unlock()
	s.arrived <- tool
	select {
	case <-s.release:
	case <-s.stop:
	}
	s.mu.Lock()
	s.inflight[tool]--
	s.mu.Unlock()
	io.WriteString(w, `{"ok":true}`)
}

// Two concurrent L1 calls of one run execute one after the other, in the
// order they arrived; two L0 calls overlap.
func TestSideEffectsToolRouteSerial(t *testing.T) {
	s := &seToolServer{inflight: map[string]int{}, most: map[string]int{}, arrived: make(chan string, 4),
		release: make(chan struct{}), stop: make(chan struct{})}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(s.stop) })
	g := seGateway(t, "http://127.0.0.1:1", hs.URL)
	runID := "r-serial-tools"
	call := func(tool, body string, done chan<- int) {
		resp, _ := tlHTTP(t, g, "POST", "/tools/"+tool+"/x", runID, body)
		done <- resp.StatusCode
	}
	done := make(chan int, 4)

	// L0: both reach the tool while neither has answered.
	go call("search", `{"q":1}`, done)
	go call("search", `{"q":2}`, done)
	<-s.arrived
	<-s.arrived
	s.release <- struct{}{}
	s.release <- struct{}{}
	for range 2 {
		if st := <-done; st != 200 {
			t.Fatalf("L0 call answered %d", st)
		}
	}

	// L1: the second waits at the gateway until the first has finished.
	go call("mutate", `{"n":1}`, done)
	<-s.arrived
	go call("mutate", `{"n":2}`, done)
	forwarded := func() int {
		var ev struct {
			Events []runstate.Event `json:"events"`
		}
		getJSON(t, adminURL(g)+"/api/v1/runs/"+runID+"/events", &ev)
		n := 0
		for _, e := range ev.Events {
			if e.Tool == "mutate" && strings.HasPrefix(e.Detail, "forwarded") {
				n++
			}
		}
		return n
	}
	for forwarded() < 2 {
		select {
		case <-t.Context().Done():
			t.Fatal("the second call never passed the gates")
		case <-time.After(time.Millisecond):
		}
	}
	s.mu.Lock()
	waiting := s.inflight["mutate"]
	s.mu.Unlock()
	if waiting != 1 {
		t.Fatalf("%d L1 calls at the tool while the first is executing, want 1", waiting)
	}
	s.release <- struct{}{}
	<-s.arrived
	s.release <- struct{}{}
	for range 2 {
		if st := <-done; st != 200 {
			t.Fatalf("L1 call answered %d", st)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.most["search"] != 2 || s.most["mutate"] != 1 {
		t.Errorf("most calls in flight: search %d (want 2), mutate %d (want 1)", s.most["search"], s.most["mutate"])
	}
	if got := strings.Join(s.order[2:], " "); got != `{"n":1} {"n":2}` {
		t.Errorf("L1 calls executed in order %s", got)
	}
}

// Tool results that arrive out of order reach the upstream in the order of
// the calls they answer, in each API; nothing else moves.
func TestSideEffectsResultsInCallOrder(t *testing.T) {
	up := newUpstream(t, seModel)
	g := seGateway(t, up.URL, "http://127.0.0.1:1")
	oc, ac := openaiClient(g), anthropicClient(g)
	ctx := t.Context()
	fn := func(id string) openai.ChatCompletionMessageToolCallUnionParam {
		return openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
			ID: id, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "search", Arguments: `{"q":"` + id + `"}`}}}
	}
	_, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage("look up three things"),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{
				fn("call_a"), fn("call_b"), fn("call_c")}}},
			openai.ToolMessage("result c", "call_c"),
			openai.ToolMessage("result a", "call_a"),
			openai.ToolMessage("result b", "call_b"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := func(id string) responses.ResponseInputItemUnionParam {
		o := responses.ResponseInputItemParamOfFunctionCallOutput("result " + id)
		o.OfFunctionCallOutput.CallID = openai.String(id)
		return o
	}
	_, err = oc.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("look up three things", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(`{"q":"a"}`, "call_a", "search"),
			responses.ResponseInputItemParamOfFunctionCall(`{"q":"b"}`, "call_b", "search"),
			responses.ResponseInputItemParamOfFunctionCall(`{"q":"c"}`, "call_c", "search"),
			out("call_b"), out("call_c"), out("call_a"),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{
		Model: "claude-haiku-4-5", MaxTokens: 100,
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("look up three things")),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_a", map[string]any{"q": "a"}, "search"),
				anthropic.NewToolUseBlock("toolu_b", map[string]any{"q": "b"}, "search"),
				anthropic.NewToolUseBlock("toolu_c", map[string]any{"q": "c"}, "search")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_c", "result c", false),
				anthropic.NewToolResultBlock("toolu_b", "result b", false),
				anthropic.NewToolResultBlock("toolu_a", "result a", false)),
		},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "search",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := up.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d upstream requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		body := string(r.Body)
		var ids []string
		switch r.Path {
		case "/v1/chat/completions":
			for _, m := range gjson.Get(body, "messages.#(role==\"tool\")#.tool_call_id").Array() {
				ids = append(ids, m.Str)
			}
		case "/v1/responses":
			for _, m := range gjson.Get(body, "input.#(type==\"function_call_output\")#.call_id").Array() {
				ids = append(ids, m.Str)
			}
		case "/v1/messages":
			for _, m := range gjson.Get(body, "messages.2.content.#.tool_use_id").Array() {
				ids = append(ids, m.Str)
			}
		}
		want := "call_a,call_b,call_c"
		if r.Path == "/v1/messages" {
			want = "toolu_a,toolu_b,toolu_c"
		}
		if got := strings.Join(ids, ","); got != want {
			t.Errorf("%s: results forwarded in the order %s: %s", r.Path, got, body)
		}
	}
}
