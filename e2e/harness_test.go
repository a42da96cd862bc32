package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/runstate"
)

// recorded is one request the fake upstream received.
type recorded struct {
	Path   string
	Header http.Header
	Body   []byte
}

// upstream is an httptest server standing in for a provider.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newUpstream(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body []byte)) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, recorded{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		u.mu.Unlock()
		h(w, r, body)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

// startGateway runs the gateway in-process on loopback with both providers
// pointed at base.
func startGateway(t *testing.T, base string, mod ...func(*config.Config)) *app.Gateway {
	t.Helper()
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL, cfg.Providers.Anthropic.BaseURL = base, base
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	for _, m := range mod {
		m(&cfg)
	}
	g, err := app.Start(context.Background(), cfg, nil)
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

func gwURL(g *app.Gateway) string    { return "http://" + g.DataAddr }
func adminURL(g *app.Gateway) string { return "http://" + g.AdminAddr }

func openaiClient(g *app.Gateway, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(gwURL(g) + "/v1"),
		option.WithAPIKey("sk-agent-test"), option.WithMaxRetries(0)}, opts...)...)
}

func anthropicClient(g *app.Gateway, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(gwURL(g)),
		aoption.WithAPIKey("sk-ant-agent-test"), aoption.WithMaxRetries(0)}, opts...)...)
}

// runRecord fetches a run's record from the control plane.
func runRecord(t *testing.T, g *app.Gateway, id string) runstate.Record {
	t.Helper()
	var rec runstate.Record
	getJSON(t, adminURL(g)+"/api/v1/runs/"+id, &rec)
	return rec
}

// settledRecord waits for the run to leave "deciding": a streamed call is
// settled when the upstream's stream ends, just after the client saw its
// last event.
func settledRecord(t *testing.T, g *app.Gateway, id string) runstate.Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec := runRecord(t, g, id)
		if rec.Status != runstate.Deciding || time.Now().After(deadline) {
			return rec
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeSSE sends a stream event by event, flushing each, as providers do.
func writeSSE(w http.ResponseWriter, stream []byte) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	s := strings.ReplaceAll(string(stream), "\r\n", "\n")
	for _, ev := range strings.SplitAfter(s, "\n\n") {
		if ev == "" {
			continue
		}
		_, _ = io.WriteString(w, ev)
		fl.Flush()
	}
}

// toolLoop is a scripted model for the OpenAI chat and Anthropic formats: it
// asks for one tool per call while tools are offered and fewer than
// finalAfter tool results are in the history, then answers. Every call's
// usage is fixed, so tests can check the meters exactly.
type toolLoop struct {
	finalAfter int
	// finalAtCall, when set, makes the n-th call final whatever the history
	// holds (the gateway may have compressed it).
	finalAtCall int
	in, out     int64
	latency     time.Duration
	// gate, when set, holds every call until it is closed (after any
	// latency): see heldUntilDecided.
	gate  <-chan struct{}
	mu    sync.Mutex
	calls int
}

func (m *toolLoop) count() int { m.mu.Lock(); defer m.mu.Unlock(); return m.calls }

// heldUntilDecided sends n calls at once (send returns once its call is
// answered) to a gateway whose upstream holds every call at gate, and
// opens the gate once each call has been refused or has reached the
// upstream: until then no call has settled, so the calls were admitted
// against reservations alone. (With the upstream answering after a fixed
// latency, a call that a loaded machine started late could find earlier
// calls settled, their unused reservation freed, and be admitted in all
// fairness.) It returns once every call was answered.
func heldUntilDecided(t *testing.T, up *upstream, gate chan struct{}, n int, send func()) {
	t.Helper()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send()
			answered.Add(1)
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for int(answered.Load())+len(up.requests()) < n && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	close(gate)
	wg.Wait()
}

func (m *toolLoop) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	m.mu.Lock()
	m.calls++
	n := m.calls
	m.mu.Unlock()
	if m.latency > 0 {
		select {
		case <-time.After(m.latency):
		case <-r.Context().Done():
			return
		}
	}
	if m.gate != nil {
		select {
		case <-m.gate:
		case <-r.Context().Done():
			return
		}
	}
	var req struct {
		Stream        bool              `json:"stream"`
		Tools         []json.RawMessage `json:"tools"`
		Messages      []json.RawMessage `json:"messages"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	_ = json.Unmarshal(body, &req)
	results := strings.Count(string(body), `"tool_call_id"`) + strings.Count(string(body), `"tool_use_id"`)
	// Like the real models: no tools, or tool_choice none, means no tool call.
	final := !offersTools(body) || results >= m.finalAfter || (m.finalAtCall > 0 && n >= m.finalAtCall)
	text := fmt.Sprintf("Answer after %d results.", results)
	args := fmt.Sprintf(`{"page":%d}`, n)
	if r.URL.Path == "/v1/messages" {
		anthropicAnswer(w, req.Stream, n, final, text, args, m.in, m.out)
		return
	}
	openaiAnswer(w, req.Stream, req.StreamOptions.IncludeUsage, n, final, text, args, m.in, m.out)
}

func openaiAnswer(w http.ResponseWriter, stream, includeUsage bool, n int, final bool, text, args string, in, out int64) {
	openaiToolAnswer(w, stream, includeUsage, n, final, text, "read_page", args, in, out)
}

// openaiToolAnswer is openaiAnswer calling the tool named tool.
func openaiToolAnswer(w http.ResponseWriter, stream, includeUsage bool, n int, final bool, text, tool, args string, in, out int64) {
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`, in, out, in+out)
	id := fmt.Sprintf("chatcmpl-loop%d", n)
	callID := fmt.Sprintf("call_loop_%d", n)
	if !stream {
		msg := fmt.Sprintf(`{"role":"assistant","content":%q}`, text)
		finish := "stop"
		if !final {
			msg = fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]}`, callID, tool, args)
			finish = "tool_calls"
		}
		writeJSON(w, 200, fmt.Appendf(nil, `{"id":%q,"object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":%s,"finish_reason":%q,"logprobs":null}],"usage":%s}`, id, msg, finish, usage))
		return
	}
	var b strings.Builder
	chunk := func(delta, finish string) {
		fmt.Fprintf(&b, `data: {"id":%q,"object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", id, delta, finish)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	if final {
		chunk(fmt.Sprintf(`{"content":%q}`, text), "null")
		chunk(`{}`, `"stop"`)
	} else {
		chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`, callID, tool), "null")
		chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"function":{"arguments":%q}}]}`, args), "null")
		chunk(`{}`, `"tool_calls"`)
	}
	if includeUsage {
		fmt.Fprintf(&b, `data: {"id":%q,"object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":%s}`+"\n\n", id, usage)
	}
	b.WriteString("data: [DONE]\n\n")
	writeSSE(w, []byte(b.String()))
}

func anthropicAnswer(w http.ResponseWriter, stream bool, n int, final bool, text, args string, in, out int64) {
	anthropicToolAnswer(w, stream, n, final, text, "read_page", args, in, out)
}

// anthropicToolAnswer is anthropicAnswer calling the tool named tool.
func anthropicToolAnswer(w http.ResponseWriter, stream bool, n int, final bool, text, tool, args string, in, out int64) {
	id := fmt.Sprintf("msg_loop%d", n)
	toolID := fmt.Sprintf("toolu_loop%d", n)
	stop := "end_turn"
	content := fmt.Sprintf(`[{"type":"text","text":%q}]`, text)
	if !final {
		stop = "tool_use"
		content = fmt.Sprintf(`[{"type":"tool_use","id":%q,"name":%q,"input":%s}]`, toolID, tool, args)
	}
	if !stream {
		writeJSON(w, 200, fmt.Appendf(nil, `{"id":%q,"type":"message","role":"assistant","model":"claude-haiku-4-5","content":%s,"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`, id, content, stop, in, out))
		return
	}
	var b strings.Builder
	ev := func(name, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`, id, in))
	if final {
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, text))
	} else {
		ev("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, toolID, tool))
		ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":%q}}`, args))
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, out))
	ev("message_stop", `{"type":"message_stop"}`)
	writeSSE(w, []byte(b.String()))
}

// openaiAgent runs a tool loop with openai-go until the model stops asking
// for tools or maxSteps; it returns the run id, steps taken and the last
// finish reason and text.
func openaiAgent(t *testing.T, client openai.Client, stream bool, maxSteps int, opts ...option.RequestOption) (runID string, steps int, finish, text string) {
	t.Helper()
	return openaiAgentWith(t, client, stream, maxSteps, func(args string) string { return "page text " + args }, opts...)
}

// openaiAgentWith is openaiAgent with the agent's own tool: result maps the
// call's arguments to its answer.
func openaiAgentWith(t *testing.T, client openai.Client, stream bool, maxSteps int, result func(args string) string, opts ...option.RequestOption) (runID string, steps int, finish, text string) {
	t.Helper()
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report page by page.")}
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})}
	for steps < maxSteps {
		var resp *http.Response
		params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools}
		o := append(append([]option.RequestOption{}, opts...), option.WithResponseInto(&resp))
		var msg openai.ChatCompletionMessage
		if stream {
			s := client.Chat.Completions.NewStreaming(ctx, params, o...)
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("step %d: %v", steps+1, err)
			}
			msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
		} else {
			c, err := client.Chat.Completions.New(ctx, params, o...)
			if err != nil {
				t.Fatalf("step %d: %v", steps+1, err)
			}
			msg, finish = c.Choices[0].Message, c.Choices[0].FinishReason
		}
		steps++
		runID = resp.Header.Get("X-Run-Id")
		if finish != "tool_calls" {
			return runID, steps, finish, msg.Content
		}
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			msgs = append(msgs, openai.ToolMessage(result(tc.Function.Arguments), tc.ID))
		}
	}
	return runID, steps, finish, ""
}

// anthropicAgent is openaiAgent with anthropic-sdk-go.
func anthropicAgent(t *testing.T, client anthropic.Client, stream bool, maxSteps int, opts ...aoption.RequestOption) (runID string, steps int, stop, text string) {
	t.Helper()
	return anthropicAgentWith(t, client, stream, maxSteps, func(args string) string { return "page text " + args }, opts...)
}

// anthropicAgentWith is anthropicAgent with the agent's own tool.
func anthropicAgentWith(t *testing.T, client anthropic.Client, stream bool, maxSteps int, result func(args string) string, opts ...aoption.RequestOption) (runID string, steps int, stop, text string) {
	t.Helper()
	ctx := context.Background()
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Read the report page by page."))}
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "read_page",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}}}
	for steps < maxSteps {
		var resp *http.Response
		params := anthropic.MessageNewParams{Model: "claude-haiku-4-5", MaxTokens: 1024, Messages: msgs, Tools: tools}
		o := append(append([]aoption.RequestOption{}, opts...), aoption.WithResponseInto(&resp))
		var msg anthropic.Message
		if stream {
			s := client.Messages.NewStreaming(ctx, params, o...)
			for s.Next() {
				if err := msg.Accumulate(s.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("step %d: %v", steps+1, err)
			}
		} else {
			m, err := client.Messages.New(ctx, params, o...)
			if err != nil {
				t.Fatalf("step %d: %v", steps+1, err)
			}
			msg = *m
		}
		steps++
		runID = resp.Header.Get("X-Run-Id")
		stop = string(msg.StopReason)
		if msg.StopReason != anthropic.StopReasonToolUse {
			for _, c := range msg.Content {
				text += c.Text
			}
			return runID, steps, stop, text
		}
		msgs = append(msgs, msg.ToParam())
		var results []anthropic.ContentBlockParamUnion
		for _, c := range msg.Content {
			if c.Type == "tool_use" {
				results = append(results, anthropic.NewToolResultBlock(c.ID, result(string(c.Input)), false))
			}
		}
		msgs = append(msgs, anthropic.NewUserMessage(results...))
	}
	return runID, steps, stop, ""
}

func aoptionHeader(k, v string) aoption.RequestOption { return aoption.WithHeader(k, v) }

// offersTools reports whether a request lets the model call tools: tools
// present and tool_choice not "none" (OpenAI "none", Anthropic {"type":"none"}).
// streamFlags reads whether a model request streams, and whether an OpenAI
// chat stream asks for its usage chunk.
func streamFlags(body []byte) (stream, includeUsage bool) {
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &req)
	return req.Stream, req.StreamOptions.IncludeUsage
}

func offersTools(body []byte) bool {
	var req struct {
		Tools      []json.RawMessage `json:"tools"`
		ToolChoice json.RawMessage   `json:"tool_choice"`
	}
	_ = json.Unmarshal(body, &req)
	tc := strings.ReplaceAll(string(req.ToolChoice), " ", "")
	return len(req.Tools) > 0 && tc != `"none"` && tc != `{"type":"none"}`
}
