package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/runstate"
)

// obsSecret and obsArgMarker are sent on purpose: neither may reach a log line.
const (
	obsSecret    = "sk-live-SECRET-7f3a9c-do-not-log"
	obsArgMarker = "ARGMARKER-4b1d-customer-ssn-123-45-6789"
)

// obsModel is an OpenAI chat upstream with a fixed script: for a task that
// contains "loop" it asks for the same tool call forever; otherwise one tool
// call per step until `tools` results are in the history, then an answer.
// Every call uses 100 input and 20 output tokens. It records each request's
// headers.
type obsModel struct {
	tools   int
	mu      sync.Mutex
	headers []http.Header
}

func (m *obsModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.headers = append(m.headers, r.Header.Clone())
	n := len(m.headers)
	m.mu.Unlock()
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	task, results := "", 0
	for _, msg := range req.Messages {
		if msg.Role == "user" && task == "" {
			_ = json.Unmarshal(msg.Content, &task)
		}
		if msg.Role == "tool" {
			results++
		}
	}
	msg := map[string]any{"role": "assistant", "content": nil}
	finish := "stop"
	if strings.Contains(task, "loop") || results < m.tools {
		finish = "tool_calls"
		msg["tool_calls"] = []any{map[string]any{"id": fmt.Sprintf("call_%d", n), "type": "function",
			"function": map[string]any{"name": "lookup", "arguments": `{"query":"` + obsArgMarker + `"}`}}}
	} else {
		msg["content"] = fmt.Sprintf("Done after %d lookups.", results)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-obs%d", n), "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
}

func (m *obsModel) requestHeaders() []http.Header {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]http.Header(nil), m.headers...)
}

// obsAgent is an ordinary tool loop with the given key; it answers every
// tool call with a result that repeats the arguments (and so the marker).
// It returns how many model calls it made.
func obsAgent(t *testing.T, g *app.Gateway, key, runID, task string, maxSteps int) int {
	t.Helper()
	c := openai.NewClient(option.WithBaseURL(gwURL(g)+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithHeader("X-Run-Id", runID))
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(task)}
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "lookup", Parameters: shared.FunctionParameters{"type": "object"}})}
	for step := 1; step <= maxSteps; step++ {
		resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		m := resp.Choices[0].Message
		if resp.Choices[0].FinishReason != "tool_calls" || len(m.ToolCalls) == 0 {
			return step
		}
		msgs = append(msgs, m.ToParam())
		for _, tc := range m.ToolCalls {
			msgs = append(msgs, openai.ToolMessage("no data for "+tc.Function.Arguments, tc.ID))
		}
	}
	return maxSteps
}

// obsGateway starts the gateway with an in-memory span exporter and JSON
// logs (debug level: every line the gateway can write) into logs.
func obsGateway(t *testing.T, upstreamURL string, logs io.Writer) (*app.Gateway, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL, cfg.Providers.Anthropic.BaseURL = upstreamURL, upstreamURL
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := app.Start(context.Background(), cfg, log, app.WithSpanExporter(exp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return g, exp
}

func attrsOf(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// A three-step run with tool calls is one trace: the run span, a span per
// state as the run moved, a client span per upstream call under its
// deciding span with the GenAI attributes, and the run's end as its status
// and an event. The upstream received the call span's traceparent. A run
// the loop guard stops ends with an error status carrying the reason.
func TestObservabilityTrace(t *testing.T) {
	t.Parallel()
	model := &obsModel{tools: 2}
	up := httptest.NewServer(model)
	t.Cleanup(up.Close)
	g, exp := obsGateway(t, up.URL, io.Discard)

	if steps := obsAgent(t, g, "sk-agent-trace", "r-trace-ok", "Look the customer up twice.", 10); steps != 3 {
		t.Fatalf("%d steps, want 3", steps)
	}
	if steps := obsAgent(t, g, "sk-agent-trace", "r-trace-loop", "loop over the logs", 10); steps > 5 {
		t.Fatalf("the looping run took %d steps", steps)
	}
	if rec := runRecord(t, g, "r-trace-loop"); rec.Reason != runstate.ReasonLoopDetected {
		t.Fatalf("looping run: %s %s", rec.Status, rec.Reason)
	}

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	runSpan := func(id string) tracetest.SpanStub {
		t.Helper()
		for _, s := range spans {
			if s.Name == "run" && attrsOf(s.Attributes)["haltline.run.id"].AsString() == id {
				return s
			}
		}
		t.Fatalf("no run span for %s among %d spans", id, len(spans))
		return tracetest.SpanStub{}
	}
	children := func(parent tracetest.SpanStub) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans {
			if s.Parent.SpanID() == parent.SpanContext.SpanID() && s.Parent.IsValid() {
				out = append(out, s)
			}
		}
		// Exported in end order; the tree reads in start order.
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				if out[j].StartTime.Before(out[i].StartTime) {
					out[i], out[j] = out[j], out[i]
				}
			}
		}
		return out
	}

	ok := runSpan("r-trace-ok")
	if ok.Parent.IsValid() {
		t.Errorf("the run span has a parent: %v", ok.Parent)
	}
	if ok.Status.Code != codes.Ok {
		t.Errorf("completed run status %v %q, want Ok", ok.Status.Code, ok.Status.Description)
	}
	var states []string
	for _, s := range children(ok) {
		states = append(states, s.Name)
		if s.SpanContext.TraceID() != ok.SpanContext.TraceID() {
			t.Errorf("state span %s is in another trace", s.Name)
		}
	}
	if got, want := strings.Join(states, " "), "deciding executing_tools deciding executing_tools deciding"; got != want {
		t.Fatalf("state spans %q, want %q", got, want)
	}
	var calls []tracetest.SpanStub
	for _, st := range children(ok) {
		kids := children(st)
		if st.Name != "deciding" {
			if len(kids) != 0 {
				t.Errorf("%s has %d child spans", st.Name, len(kids))
			}
			continue
		}
		if len(kids) != 1 {
			t.Fatalf("deciding span has %d children, want 1 upstream call", len(kids))
		}
		calls = append(calls, kids[0])
	}
	for i, c := range calls {
		finish := "tool_calls"
		if i == 2 {
			finish = "stop"
		}
		a := attrsOf(c.Attributes)
		for _, tc := range []struct {
			key  string
			want any
		}{
			{"gen_ai.system", "openai"},
			{"gen_ai.operation.name", "chat"},
			{"gen_ai.request.model", "gpt-4o-mini"},
			{"gen_ai.usage.input_tokens", int64(100)},
			{"gen_ai.usage.output_tokens", int64(20)},
			{"http.response.status_code", int64(200)},
			{"haltline.step", int64(i + 1)},
		} {
			if got := a[tc.key].AsInterface(); got != tc.want {
				t.Errorf("call %d: %s = %v (%T), want %v", i+1, tc.key, got, got, tc.want)
			}
		}
		if got := a["gen_ai.response.finish_reasons"].AsStringSlice(); len(got) != 1 || got[0] != finish {
			t.Errorf("call %d: finish reasons %v, want [%s]", i+1, got, finish)
		}
		if c.SpanKind != trace.SpanKindClient || c.Name != "chat gpt-4o-mini" {
			t.Errorf("call %d: span %q kind %v", i+1, c.Name, c.SpanKind)
		}
		// The upstream saw this span as its parent.
		tp := model.requestHeaders()[i].Get("Traceparent")
		want := fmt.Sprintf("00-%s-%s-01", c.SpanContext.TraceID(), c.SpanContext.SpanID())
		if tp != want {
			t.Errorf("call %d: upstream traceparent %q, want %q", i+1, tp, want)
		}
	}
	var ended *sdktrace.Event
	for i, e := range ok.Events {
		if e.Name == "run.ended" {
			ended = &ok.Events[i]
		}
	}
	if ended == nil || attrsOf(ended.Attributes)["haltline.termination.reason"].AsString() != "completed" {
		t.Errorf("completed run: events %+v", ok.Events)
	}

	loop := runSpan("r-trace-loop")
	if loop.Status.Code != codes.Error || loop.Status.Description != runstate.ReasonLoopDetected {
		t.Errorf("looping run status %v %q, want Error loop_detected", loop.Status.Code, loop.Status.Description)
	}
	a := attrsOf(loop.Attributes)
	if a["haltline.termination.reason"].AsString() != runstate.ReasonLoopDetected || a["haltline.run.state"].AsString() != "terminated" {
		t.Errorf("looping run attributes %v", loop.Attributes)
	}
	found := false
	for _, e := range loop.Events {
		ea := attrsOf(e.Attributes)
		if e.Name == "run.ended" && ea["haltline.termination.detector"].AsString() != "" && ea["haltline.last_action.arguments_hash"].AsString() != "" {
			found = true
		}
	}
	if !found {
		t.Errorf("looping run: no run.ended event with detector and arguments hash: %+v", loop.Events)
	}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), obsArgMarker) {
				t.Errorf("span %s attribute %s holds the raw tool arguments", s.Name, kv.Key)
			}
		}
	}
}

// After scripted runs the control plane's metrics hold exact values: calls,
// tokens, runs by state, terminations and loop detections by reason and
// detector, reservations, policy decisions and upstream time to first byte.
func TestObservabilityMetrics(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(&obsModel{tools: 2})
	t.Cleanup(up.Close)
	g, _ := obsGateway(t, up.URL, io.Discard)
	obsAgent(t, g, "sk-agent-metrics", "r-metrics-ok", "Look the customer up twice.", 10)
	loopSteps := obsAgent(t, g, "sk-agent-metrics", "r-metrics-loop", "loop over the logs", 10)
	if rec := runRecord(t, g, "r-metrics-loop"); rec.Reason != runstate.ReasonLoopDetected {
		t.Fatalf("looping run: %s %s", rec.Status, rec.Reason)
	}
	// Every call went upstream: the loop guard judges the looping run's
	// last response and replaces it with the gateway's final answer.
	forwarded := 3 + loopSteps

	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]int{}
	for _, mf := range mfs {
		fams[mf.GetName()] = len(mf.GetMetric())
	}
	text, err := http.Get(adminURL(g) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer text.Body.Close()
	body, _ := io.ReadAll(text.Body)
	for _, tc := range []struct {
		desc, series string
		want         float64
	}{
		{"forwarded calls", `haltline_model_calls_total{api="openai.chat",status="200"}`, float64(forwarded)},
		{"input tokens", `haltline_tokens_total{model="gpt-4o-mini",provider="openai",type="input"}`, float64(100 * forwarded)},
		{"output tokens", `haltline_tokens_total{model="gpt-4o-mini",provider="openai",type="output"}`, float64(20 * forwarded)},
		{"runs completed", `haltline_runs{state="completed"}`, 1},
		{"runs terminated", `haltline_runs{state="terminated"}`, 1},
		{"runs started", `haltline_runs_started_total`, 2},
		{"runs active", `haltline_runs_active`, 0},
		{"loop termination", `haltline_terminations_total{mode="enforce",reason="loop_detected"}`, 1},
		{"loop run ended", `haltline_runs_ended_total{reason="loop_detected",state="terminated"}`, 1},
		{"completed run ended", `haltline_runs_ended_total{reason="completed",state="completed"}`, 1},
		{"reservations", `haltline_reservations_total{result="ok"}`, float64(forwarded)},
		{"first byte observations", `haltline_upstream_first_byte_seconds_count{api="openai.chat"}`, float64(forwarded)},
		{"overhead observations", `haltline_gateway_overhead_seconds_count{api="openai.chat"}`, float64(forwarded)},
		{"model policy decisions", `haltline_policy_decisions_total{package="haltline.model",result="allow"}`, float64(forwarded)},
		{"policy evaluation time", `haltline_policy_evaluation_seconds_count{package="haltline.model"}`, float64(forwarded)},
	} {
		got, ok := seriesValue(string(body), tc.series)
		if !ok || got != tc.want {
			t.Errorf("%s: %s = %v (present %t), want %v", tc.desc, tc.series, got, ok, tc.want)
		}
	}
	// The loop guard names the detector; whichever it was, it counted once.
	detections := 0.0
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "haltline_loop_detections_total{") && strings.Contains(l, `mode="enforce"`) {
			var f float64
			_, _ = fmt.Sscanf(l[strings.LastIndex(l, " ")+1:], "%g", &f)
			detections += f
		}
	}
	if detections != 1 {
		t.Errorf("%v loop detections counted, want 1", detections)
	}
	// Every metric the Grafana dashboard queries exists.
	dash, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "haltline-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`haltline_[a-z_]+`).FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(name, "_bucket")
		if _, ok := fams[base]; !ok && name != "haltline_overview" {
			t.Errorf("the dashboard queries %s, which the gateway does not export", name)
		}
	}
	problems, err := testutil.GatherAndLint(g.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "haltline_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "haltline_") && (strings.Contains(l, "r-metrics") || strings.Contains(l, "run_id")) {
			t.Errorf("a run id is a label: %s", l)
		}
	}
}

// seriesValue reads one series from the text exposition format; labels in
// series must be in the exposition's (sorted) order.
func seriesValue(exposition, series string) (float64, bool) {
	for _, l := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(l, series+" ") {
			var f float64
			if _, err := fmt.Sscanf(strings.TrimPrefix(l, series+" "), "%g", &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// A run whose requests carry an API key and tool arguments with a marker
// leaves neither in any log line, and its calls and end are logged with the
// fixed keys.
func TestObservabilityLogsNoSecrets(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(&obsModel{tools: 2})
	t.Cleanup(up.Close)
	logs := &syncBuffer{}
	g, _ := obsGateway(t, up.URL, logs)
	obsAgent(t, g, obsSecret, "r-logs-ok", "Look the customer up twice: "+obsArgMarker, 10)
	obsAgent(t, g, obsSecret, "r-logs-loop", "loop over the logs of "+obsArgMarker, 10)
	// And a refused request, whose error path logs too.
	req, _ := http.NewRequest("POST", gwURL(g)+"/v1/chat/completions", strings.NewReader(`{"model":`+obsArgMarker))
	req.Header.Set("Authorization", "Bearer "+obsSecret)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}

	out := logs.String()
	for _, secret := range []string{obsSecret, obsArgMarker, "SECRET-7f3a9c", "123-45-6789"} {
		if strings.Contains(out, secret) {
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, secret) {
					t.Errorf("log line holds %q: %s", secret, l)
				}
			}
		}
	}
	calls, ends := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %s", l)
		}
		switch m["msg"] {
		case "model call":
			calls++
			for _, k := range []string{"run_id", "api", "model", "status", "step", "input_tokens", "output_tokens", "cost_usd", "duration_ms", "overhead_ms"} {
				if _, ok := m[k]; !ok {
					t.Errorf("call line without %s: %s", k, l)
				}
			}
		case "run ended":
			ends++
			if m["run_id"] == "r-logs-loop" && (m["reason"] != "loop_detected" || m["args_hash"] == "") {
				t.Errorf("termination line: %s", l)
			}
		}
	}
	if calls < 6 || ends != 2 {
		t.Errorf("%d call lines and %d termination lines, want ≥ 6 and 2:\n%s", calls, ends, out)
	}
}
