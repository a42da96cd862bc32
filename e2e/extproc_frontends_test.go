package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
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

// One behaviour, two front ends (docs/design.md §1): every case below runs against
// the fasthttp proxy and against the ext_proc server driven by envoyEmu over
// real gRPC. Each case checks what it expects on both, and returns the facts
// the client and the control plane saw; the facts of the two front ends must
// be equal, so any difference is a failure with the case named.

// frontEnds are the two ways an agent reaches the core.
var frontEnds = []string{"http", "extproc"}

// feGateway is a gateway and the client an agent uses to reach it through
// one front end.
type feGateway struct {
	*app.Gateway
	base   string // the agent's base URL, without /v1
	client *http.Client
	emu    *envoyEmu // nil for the HTTP front end
}

func startFrontEnd(t *testing.T, fe, upstream string, mod ...func(*config.Config)) *feGateway {
	t.Helper()
	if fe == "http" {
		g := startGateway(t, upstream, mod...)
		return &feGateway{Gateway: g, base: gwURL(g), client: &http.Client{Timeout: 30 * time.Second}}
	}
	mod = append(mod, func(c *config.Config) { c.ExtProcListen = "127.0.0.1:0" })
	g := startGateway(t, upstream, mod...)
	emu := newEnvoyEmu(t, g.ExtProcAddr, upstream)
	return &feGateway{Gateway: g, base: "http://envoy.test:10000", client: &http.Client{Transport: emu, Timeout: 30 * time.Second}, emu: emu}
}

func (f *feGateway) openai(opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(f.base + "/v1"),
		option.WithHTTPClient(f.client), option.WithAPIKey("sk-agent-test"), option.WithMaxRetries(0)}, opts...)...)
}

func (f *feGateway) anthropic(opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(f.base),
		aoption.WithHTTPClient(f.client), aoption.WithAPIKey("sk-ant-agent-test"), aoption.WithMaxRetries(0)}, opts...)...)
}

// post sends a raw request through the front end and reads the whole answer.
func (f *feGateway) post(t *testing.T, route string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.base+route, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if hdr["Authorization"] == "" && hdr["x-api-key"] == "" {
		req.Header.Set("Authorization", "Bearer sk-agent-test")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", route, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", route, err)
	}
	return resp, b
}

// facts is what a case observed, in a form both front ends must share.
type facts []string

func (f *facts) add(format string, args ...any) { *f = append(*f, fmt.Sprintf(format, args...)) }

// record adds the run record's outcome and meters.
func (f *facts) record(rec runstate.Record) {
	f.add("record status=%s reason=%s steps=%d model_calls=%d tool_calls=%d in=%d out=%d cached=%d",
		rec.Status, rec.Reason, rec.AgentSteps, rec.ModelCalls, rec.ToolCalls, rec.InputTokens, rec.OutputTokens, rec.CachedTokens)
}

// volatile hides what differs between two gateways by construction: run
// ids, synthetic message ids and timestamps.
var volatile = regexp.MustCompile(`(r-|run_|run-|msg_|chatcmpl-|resp_)[A-Za-z0-9_-]{6,}|"created(_at)?":\s*\d+|` +
	`time_ms=\d+|"(elapsed_ms|resume_token|created|ended|last_activity|idle_ms)":("[^"]*"|\d+)`)

func (f *facts) answer(resp *http.Response, body []byte) {
	f.add("status %d", resp.StatusCode)
	f.add("content-type %s", resp.Header.Get("Content-Type"))
	for _, k := range []string{"X-Run-State", "X-Run-Step", "X-Run-Budget-Remaining", "X-Run-Termination", "X-Should-Retry"} {
		f.add("%s: %s", k, volatile.ReplaceAllString(resp.Header.Get(k), "<v>"))
	}
	f.add("X-Run-Id present: %v", resp.Header.Get("X-Run-Id") != "")
	f.add("body %s", volatile.ReplaceAllString(string(body), "<id>"))
}

type feCase struct {
	desc string
	run  func(t *testing.T, fe string) facts
}

func TestFrontEndsOneBehaviour(t *testing.T) {
	t.Parallel()
	for _, tc := range feCases() {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			seen := map[string]facts{}
			var mu sync.Mutex
			// Run the front ends side by side, then compare.
			t.Run("fe", func(t *testing.T) {
				for _, fe := range frontEnds {
					t.Run(fe, func(t *testing.T) {
						t.Parallel()
						f := tc.run(t, fe)
						mu.Lock()
						seen[fe] = f
						mu.Unlock()
					})
				}
			})
			a, b := seen["http"], seen["extproc"]
			if t.Failed() || a == nil || b == nil {
				return
			}
			for i := 0; i < max(len(a), len(b)); i++ {
				var x, y string
				if i < len(a) {
					x = a[i]
				}
				if i < len(b) {
					y = b[i]
				}
				if x != y {
					t.Errorf("front ends differ at fact %d:\n  http:    %s\n  extproc: %s", i, x, y)
				}
			}
		})
	}
}

func feCases() []feCase {
	chatNoUsage := []byte(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hi."}]}`)
	return []feCase{
		{desc: "openai chat tool loop, not streamed, one run by lineage", run: func(t *testing.T, fe string) facts {
			return feToolLoop(t, fe, false, false)
		}},
		{desc: "openai chat tool loop, streamed, one run by lineage", run: func(t *testing.T, fe string) facts {
			return feToolLoop(t, fe, true, false)
		}},
		{desc: "anthropic tool loop, not streamed", run: func(t *testing.T, fe string) facts {
			return feToolLoop(t, fe, false, true)
		}},
		{desc: "anthropic tool loop, streamed", run: func(t *testing.T, fe string) facts {
			return feToolLoop(t, fe, true, true)
		}},
		{desc: "openai stream metered chunk by chunk, include_usage stripped", run: func(t *testing.T, fe string) facts {
			up := newUpstream(t, slowChatStream)
			g := startFrontEnd(t, fe, up.URL)
			resp, body := g.post(t, "/v1/chat/completions", nil, chatNoUsage)
			var f facts
			f.answer(resp, body)
			if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("answer %d %q", resp.StatusCode, body)
			}
			if strings.Contains(string(body), `"usage"`) {
				t.Fatalf("the injected usage chunk reached the client: %s", body)
			}
			if !strings.Contains(string(up.requests()[0].Body), `"include_usage":true`) {
				t.Fatalf("include_usage not injected upstream: %s", up.requests()[0].Body)
			}
			rec := settledRecord(t, g.Gateway, resp.Header.Get("X-Run-Id"))
			if rec.InputTokens != 42 || rec.OutputTokens != 7 {
				t.Fatalf("metered %d/%d, want 42/7", rec.InputTokens, rec.OutputTokens)
			}
			f.record(rec)
			if g.emu != nil {
				// Every upstream event went to the gateway as its own message,
				// and the usage chunk was cut out of one of them.
				if n := g.emu.responseChunks.Load(); n < 4 {
					t.Fatalf("only %d response body messages: not streamed chunk by chunk", n)
				}
				if g.emu.bodyMutations.Load() < 1 {
					t.Fatal("no chunk was rewritten")
				}
			}
			return f
		}},
		{desc: "responses stream passes byte for byte", run: func(t *testing.T, fe string) facts {
			up := newUpstream(t, spServeFixture(t, "openai-responses/stream-function-call.sse"))
			g := startFrontEnd(t, fe, up.URL)
			resp, body := g.post(t, "/v1/responses", nil, []byte(`{"model":"gpt-5.5","stream":true,"input":"Weather in Paris?"}`))
			if want := fixture(t, "openai-responses/stream-function-call.sse"); !bytes.Equal(bytes.ReplaceAll(want, []byte("\r\n"), []byte("\n")), body) {
				t.Fatalf("stream changed:\n%s", body)
			}
			var f facts
			f.add("status %d, %d bytes", resp.StatusCode, len(body))
			f.record(settledRecord(t, g.Gateway, resp.Header.Get("X-Run-Id")))
			return f
		}},
		{desc: "refusal: unknown virtual key, in each provider's format", run: func(t *testing.T, fe string) facts {
			up := newUpstream(t, (&toolLoop{}).serve)
			g := startFrontEnd(t, fe, up.URL, func(c *config.Config) {
				c.VirtualKeys = map[string]config.Principal{"sk-red-1": {Tenant: "acme", Team: "red"}}
			})
			var f facts
			resp, body := g.post(t, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-wrong"}, spChatBody(false, ""))
			f.answer(resp, body)
			resp, body = g.post(t, "/v1/messages", map[string]string{"x-api-key": "sk-wrong", "anthropic-version": "2023-06-01"}, spMessagesBody(true))
			f.answer(resp, body)
			if resp.StatusCode != 401 || !strings.Contains(string(body), "authentication_error") {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
			if len(up.requests()) != 0 {
				t.Fatal("a refused call reached the upstream")
			}
			return f
		}},
		{desc: "virtual key swapped for the provider key, run headers dropped", run: func(t *testing.T, fe string) facts {
			up := newUpstream(t, (&toolLoop{in: 5, out: 5}).serve)
			g := startFrontEnd(t, fe, up.URL, func(c *config.Config) {
				c.VirtualKeys = map[string]config.Principal{"sk-red-1": {Tenant: "acme", Team: "red"}}
				c.Providers.OpenAI.APIKey, c.Providers.Anthropic.APIKey = "sk-openai-held", "sk-ant-held"
			})
			run := map[string]string{"Authorization": "Bearer sk-red-1", "X-Agent-Id": "planner", "X-Session-Id": "s-1", "X-Task-Type": "research", "X-Run-Budget": "max_steps=9"}
			var f facts
			resp, body := g.post(t, "/v1/chat/completions", run, spChatBody(false, ""))
			f.answer(resp, body)
			resp, body = g.post(t, "/v1/messages", map[string]string{"x-api-key": "sk-red-1"}, spMessagesBody(false))
			f.answer(resp, body)
			reqs := up.requests()
			if len(reqs) != 2 {
				t.Fatalf("upstream saw %d calls", len(reqs))
			}
			oa, an := reqs[0].Header, reqs[1].Header
			if oa.Get("Authorization") != "Bearer sk-openai-held" || an.Get("X-Api-Key") != "sk-ant-held" || an.Get("Authorization") != "" {
				t.Fatalf("credentials upstream: openai %q, anthropic %q/%q", oa.Get("Authorization"), an.Get("X-Api-Key"), an.Get("Authorization"))
			}
			if an.Get("Anthropic-Version") == "" {
				t.Fatal("anthropic-version not set upstream")
			}
			for _, k := range []string{"X-Agent-Id", "X-Session-Id", "X-Task-Type", "X-Run-Budget", "X-Envoy-Upstream-Rq-Timeout-Ms"} {
				if v := oa.Get(k); v != "" {
					t.Fatalf("%s reached the upstream: %q", k, v)
				}
			}
			return f
		}},
		{desc: "refusal: malformed body", run: func(t *testing.T, fe string) facts {
			up := newUpstream(t, (&toolLoop{}).serve)
			g := startFrontEnd(t, fe, up.URL)
			var f facts
			resp, body := g.post(t, "/v1/chat/completions", nil, []byte(`{"model":"gpt-4o","messages":[`))
			f.answer(resp, body)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			return f
		}},
		{desc: "termination in reject mode: 429 not to be retried", run: func(t *testing.T, fe string) facts {
			up := newUpstream(t, (&toolLoop{in: 100, out: 10}).serve)
			g := startFrontEnd(t, fe, up.URL, withPolicy(policyDir(t, `{"haltline":{"terminations":{"mode":"reject"}}}`)))
			var f facts
			resp, body := g.post(t, "/v1/chat/completions", map[string]string{"X-Run-Budget": "max_tokens=10"}, fixedRequest(10))
			f.answer(resp, body)
			if resp.StatusCode != 429 || resp.Header.Get("x-should-retry") != "false" || resp.Header.Get("X-Run-Termination") != runstate.ReasonTokenBudget {
				t.Fatalf("answer %d %v %s", resp.StatusCode, resp.Header, body)
			}
			if len(up.requests()) != 0 {
				t.Fatal("a refused call reached the upstream")
			}
			return f
		}},
		{desc: "termination: ended run answered with a synthetic final stream", run: func(t *testing.T, fe string) facts {
			m := &toolLoop{finalAfter: 1000, in: 100, out: 10}
			up := newUpstream(t, m.serve)
			g := startFrontEnd(t, fe, up.URL)
			runID, steps, finish, _ := openaiAgent(t, g.openai(), true, 10, option.WithHeader("X-Run-Budget", "max_steps=2"))
			var f facts
			f.add("agent steps=%d finish=%s", steps, finish)
			// The run is over: the next call is answered by the gateway.
			resp, body := g.post(t, "/v1/chat/completions", map[string]string{"X-Run-Id": runID}, chatNoUsage)
			f.answer(resp, body)
			if resp.StatusCode != 200 || !strings.Contains(string(body), "step limit") || !strings.Contains(string(body), `"finish_reason":"stop"`) {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
			if m.count() != 2 {
				t.Fatalf("upstream saw %d calls", m.count())
			}
			f.record(settledRecord(t, g.Gateway, runID))
			return f
		}},
		{desc: "termination: deadline while the call is upstream", run: func(t *testing.T, fe string) facts {
			m := &toolLoop{finalAfter: 1000, in: 100, out: 10, latency: 700 * time.Millisecond}
			up := newUpstream(t, m.serve)
			g := startFrontEnd(t, fe, up.URL)
			runID, steps, finish, text := openaiAgent(t, g.openai(), true, 20, option.WithHeader("X-Run-Budget", "deadline_ms=1500"))
			var f facts
			f.add("agent steps=%d finish=%s deadline in text=%v", steps, finish, strings.Contains(text, "deadline"))
			rec := runRecord(t, g.Gateway, runID)
			if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonDeadline {
				t.Fatalf("record %+v", rec)
			}
			f.add("record status=%s reason=%s steps=%d", rec.Status, rec.Reason, rec.AgentSteps)
			return f
		}},
		{desc: "termination: operator cancel while the call is upstream", run: func(t *testing.T, fe string) facts {
			m := &toolLoop{finalAfter: 1000, in: 100, out: 10, latency: 3 * time.Second}
			up := newUpstream(t, m.serve)
			g := startFrontEnd(t, fe, up.URL)
			go func() {
				for m.count() == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				req, _ := http.NewRequest(http.MethodPost, adminURL(g.Gateway)+"/api/v1/runs/r-cancel-me/cancel", nil)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			start := time.Now()
			resp, body := g.post(t, "/v1/chat/completions", map[string]string{"X-Run-Id": "r-cancel-me"}, spChatBody(false, ""))
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the call outlived its cancelled run by %v", took)
			}
			var f facts
			f.answer(resp, body)
			f.record(runRecord(t, g.Gateway, "r-cancel-me"))
			return f
		}},
		{desc: "client gone mid-stream: settled once, at the worst case", run: func(t *testing.T, fe string) facts {
			release := make(chan struct{})
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				_, _ = io.WriteString(w, `data: {"id":"chatcmpl-cut","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
			defer close(release)
			g := startFrontEnd(t, fe, up.URL)
			req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions", bytes.NewReader(fixedRequestStream(50)))
			req.Header.Set("Authorization", "Bearer sk-agent-test")
			resp, err := g.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 64)
			if _, err := io.ReadAtLeast(resp.Body, first, 10); err != nil {
				t.Fatal(err)
			}
			runID := resp.Header.Get("X-Run-Id")
			resp.Body.Close() // the agent goes away mid-answer
			var f facts
			rec := settledRecord(t, g.Gateway, runID)
			f.record(rec)
			if rec.ModelCalls != 1 || rec.Status == runstate.Deciding {
				t.Fatalf("record %+v", rec)
			}
			return f
		}},
		{desc: "termination: operator cancel mid-stream cuts the stream", run: func(t *testing.T, fe string) facts {
			upstreamGone := make(chan struct{})
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				_, _ = io.WriteString(w, `data: {"id":"chatcmpl-cut","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					close(upstreamGone)
				case <-time.After(10 * time.Second):
				}
			})
			g := startFrontEnd(t, fe, up.URL)
			req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions", bytes.NewReader(fixedRequestStream(50)))
			req.Header.Set("Authorization", "Bearer sk-agent-test")
			req.Header.Set("X-Run-Id", "r-cut-me")
			resp, err := g.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, 64)
			if _, err := io.ReadAtLeast(resp.Body, first, 10); err != nil {
				t.Fatal(err)
			}
			creq, _ := http.NewRequest(http.MethodPost, adminURL(g.Gateway)+"/api/v1/runs/r-cut-me/cancel", nil)
			creq.Header.Set("Content-Type", "application/json")
			cresp, err := http.DefaultClient.Do(creq)
			if err != nil {
				t.Fatal(err)
			}
			cresp.Body.Close()
			// The client's stream ends (cleanly on the proxy, by a reset
			// through Envoy: examples/envoy/README.md) and the upstream call
			// is cut on both.
			done := make(chan struct{})
			go func() { _, _ = io.Copy(io.Discard, resp.Body); close(done) }()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				t.Fatal("the stream outlived its cancelled run")
			}
			select {
			case <-upstreamGone:
			case <-time.After(3 * time.Second):
				t.Fatal("the upstream call outlived its cancelled run")
			}
			var f facts
			f.record(settledRecord(t, g.Gateway, "r-cut-me"))
			return f
		}},
		{desc: "upstream unreachable: 502 in the provider's format", run: func(t *testing.T, fe string) facts {
			g := startFrontEnd(t, fe, spClosedURL(t))
			var f facts
			resp, body := g.post(t, "/v1/messages", map[string]string{"anthropic-version": "2023-06-01"}, spMessagesBody(false))
			f.answer(resp, body)
			if resp.StatusCode != 502 {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
			f.record(runRecord(t, g.Gateway, resp.Header.Get("X-Run-Id")))
			return f
		}},
		{desc: "upstream error passes through", run: func(t *testing.T, fe string) facts {
			b := fixture(t, "openai-chat/error-404-model-not-found.json")
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { writeJSON(w, 404, b) })
			g := startFrontEnd(t, fe, up.URL)
			var f facts
			resp, body := g.post(t, "/v1/chat/completions", nil, spChatBody(true, ""))
			f.answer(resp, body)
			if resp.StatusCode != 404 || !bytes.Equal(body, b) {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
			f.record(runRecord(t, g.Gateway, resp.Header.Get("X-Run-Id")))
			return f
		}},
	}
}

// fixedRequestStream is fixedRequest as a stream.
func fixedRequestStream(maxOut int) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-4o-mini","stream":true,"max_completion_tokens":%d,"messages":[{"role":"user","content":"Summarise the report."}]}`, maxOut)
}

// slowChatStream answers a chat stream event by event with a pause between
// them, as a model does, so each event reaches the front end on its own.
func slowChatStream(w http.ResponseWriter, _ *http.Request, body []byte) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	chunk := func(delta, finish string) string {
		return fmt.Sprintf(`data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	events := []string{chunk(`{"role":"assistant","content":""}`, "null"), chunk(`{"content":"Hel"}`, "null"),
		chunk(`{"content":"lo."}`, "null"), chunk(`{}`, `"stop"`)}
	if strings.Contains(string(body), `"include_usage":true`) {
		events = append(events, `data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":42,"completion_tokens":7,"total_tokens":49}}`+"\n\n")
	}
	events = append(events, "data: [DONE]\n\n")
	for _, ev := range events {
		_, _ = io.WriteString(w, ev)
		fl.Flush()
		time.Sleep(10 * time.Millisecond)
	}
}

// feToolLoop runs a three-step tool loop with an official SDK, without
// X-Run-Id: the calls are one run by lineage alone.
func feToolLoop(t *testing.T, fe string, stream, isAnthropic bool) facts {
	m := &toolLoop{finalAfter: 2, in: 100, out: 10}
	up := newUpstream(t, m.serve)
	g := startFrontEnd(t, fe, up.URL)
	var runID, finish, text string
	var steps int
	if isAnthropic {
		runID, steps, finish, text = anthropicAgent(t, g.anthropic(), stream, 10, aoption.WithHeader("X-Agent-Id", "reader"))
	} else {
		runID, steps, finish, text = openaiAgent(t, g.openai(), stream, 10, option.WithHeader("X-Agent-Id", "reader"))
	}
	var f facts
	f.add("agent steps=%d finish=%s text=%s", steps, finish, text)
	if steps != 3 || (finish != "stop" && finish != "end_turn") {
		t.Fatalf("agent: steps %d finish %q", steps, finish)
	}
	rec := settledRecord(t, g.Gateway, runID)
	if rec.AgentSteps != 3 || rec.ModelCalls != 3 || rec.InputTokens != 300 || rec.OutputTokens != 30 || rec.Status != runstate.Completed {
		t.Fatalf("record %+v", rec)
	}
	f.record(rec)
	for i, r := range up.requests() {
		if r.Header.Get("X-Agent-Id") != "" {
			t.Fatalf("call %d: X-Agent-Id reached the upstream", i+1)
		}
	}
	return f
}
