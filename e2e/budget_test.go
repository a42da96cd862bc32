package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

func hasTools(body []byte) bool { return offersTools(body) }

// max_steps=4 ends after exactly 4 agent steps: the 4th call is forwarded as
// the wrap-up (no tools), and the framework gets a normal final answer.
func TestMaxStepsEndsAfterExactlyThoseSteps(t *testing.T) {
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
			m := &toolLoop{finalAfter: 1000, in: 500, out: 40}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			var runID, finish, text string
			var steps int
			if tc.anthropic {
				runID, steps, finish, text = anthropicAgent(t, anthropicClient(g), tc.stream, 20, aoptionHeader("X-Run-Budget", "max_steps=4"))
			} else {
				runID, steps, finish, text = openaiAgent(t, openaiClient(g), tc.stream, 20, option.WithHeader("X-Run-Budget", "max_steps=4"))
			}
			if steps != 4 || (finish != "stop" && finish != "end_turn") || text == "" {
				t.Fatalf("agent: steps %d finish %q text %q", steps, finish, text)
			}
			rec := settledRecord(t, g, runID)
			if rec.AgentSteps != 4 || rec.MaxSteps != 4 || rec.Status != runstate.CompletedWithDegradation || rec.Reason != runstate.ReasonMaxSteps {
				t.Fatalf("record %+v", rec)
			}
			reqs := up.requests()
			if len(reqs) != 4 {
				t.Fatalf("upstream saw %d calls", len(reqs))
			}
			for i, r := range reqs {
				if hasTools(r.Body) != (i < 3) {
					t.Fatalf("call %d tools=%v", i+1, hasTools(r.Body))
				}
			}
			if !strings.Contains(string(reqs[3].Body), "best conclusion") {
				t.Fatalf("wrap-up instruction missing: %s", reqs[3].Body)
			}
		})
	}
}

// An exhausted token budget produces an upstream request without tools,
// then the final answer; spent never exceeds the budget. Calls asking for
// more output than fits (max 64,000) go on with lowered caps, tools kept,
// until only the final reserve is left.
func TestTokenBudgetWrapsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		stream    bool
		anthropic bool
		budget    int64
		in, out   int64
		maxOut    int64 // what each request asks for; 0: the agent's own
		minCalls  int
	}{
		{"openai", false, false, 12000, 1000, 50, 0, 2},
		{"anthropic stream", true, true, 12000, 1000, 50, 0, 2},
		{"openai max output 64000", false, false, 50000, 4000, 900, 64000, 5},
		{"anthropic stream max output 64000", true, true, 50000, 4000, 900, 64000, 5},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1000, in: tc.in, out: tc.out}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			runID, _, finish, _ := budgetAgent(t, g, tc.anthropic, tc.stream, 40, fmt.Sprintf("max_tokens=%d", tc.budget), tc.maxOut, "")
			if finish != "stop" && finish != "end_turn" {
				t.Fatalf("finish %q", finish)
			}
			rec := settledRecord(t, g, runID)
			if rec.Status != runstate.CompletedWithDegradation || rec.Reason != runstate.ReasonTokenBudget {
				t.Fatalf("record %+v", rec)
			}
			if rec.TotalTokens > tc.budget {
				t.Fatalf("spent %d tokens of %d", rec.TotalTokens, tc.budget)
			}
			reqs := up.requests()
			last := reqs[len(reqs)-1]
			if hasTools(last.Body) || len(reqs) < tc.minCalls || !strings.Contains(string(last.Body), "best conclusion") {
				t.Fatalf("%d calls; the last was no wrap-up: %s", len(reqs), last.Body)
			}
			for _, r := range reqs[:len(reqs)-1] {
				if !hasTools(r.Body) {
					t.Fatal("a call before the wrap-up lost its tools")
				}
			}
		})
	}
}

// deadline_ms=1500 with 700 ms upstream latency ends by deadline, with a
// final answer, in well under 2.5 s.
func TestDeadlineEndsRun(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1000, in: 100, out: 10, latency: 700 * time.Millisecond}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL)
			start := time.Now()
			runID, _, finish, text := openaiAgent(t, openaiClient(g), stream, 20, option.WithHeader("X-Run-Budget", "deadline_ms=1500"))
			took := time.Since(start)
			t.Logf("ended after %v", took)
			if took > 2500*time.Millisecond {
				t.Fatalf("run took %v", took)
			}
			if finish != "stop" || !strings.Contains(text, "deadline") {
				t.Fatalf("finish %q text %q", finish, text)
			}
			rec := runRecord(t, g, runID)
			if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonDeadline || rec.DeadlineMs != 1500 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

func policyDir(t *testing.T, data string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func withPolicy(dir string) func(*config.Config) {
	return func(c *config.Config) { c.PolicyDir = dir }
}

func counterValue(t *testing.T, g *app.Gateway, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// In reject mode a run that must end is answered with an error in the
// provider's format, x-should-retry: false and the record in the body; the
// SDK (with its default retries) does not retry it.
func TestRejectMode(t *testing.T) {
	t.Parallel()
	m := &toolLoop{finalAfter: 1000, in: 100, out: 10}
	up := newUpstream(t, m.serve)
	g := startGateway(t, up.URL, withPolicy(policyDir(t, `{"haltline":{"terminations":{"mode":"reject"}}}`)))
	client := openai.NewClient(option.WithBaseURL(gwURL(g)+"/v1"), option.WithAPIKey("sk-x")) // default retries
	params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	var resp *http.Response
	_, err := client.Chat.Completions.New(context.Background(), params,
		option.WithHeader("X-Run-Budget", "max_tokens=100"), option.WithResponseInto(&resp))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("want a 429, got %v", err)
	}
	if resp.Header.Get("x-should-retry") != "false" || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("headers %v", resp.Header)
	}
	if resp.Header.Get("X-Run-Termination") != runstate.ReasonTokenBudget {
		t.Fatalf("termination header %q", resp.Header.Get("X-Run-Termination"))
	}
	// The body carries the record next to the OpenAI error object.
	_, _, raw := post(t, gwURL(g)+"/v1/chat/completions", fixedRequest(10), map[string]string{"X-Run-Id": resp.Header.Get("X-Run-Id"),
		"Authorization": "Bearer sk-x"})
	var body struct {
		Error    struct{ Type, Message string }
		Haltline runstate.Record
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.Haltline.Reason != runstate.ReasonTokenBudget || body.Error.Message == "" {
		t.Fatalf("body %s (%v)", raw, err)
	}
	if n := counterValue(t, g, "haltline_model_calls_total", map[string]string{"status": "429"}); n != 2 {
		t.Fatalf("gateway answered %v refused calls: the SDK retried", n)
	}
	if len(up.requests()) != 0 {
		t.Fatal("a refused call reached the upstream")
	}

	// Deadline in reject mode is a 504 that is not retried either.
	m2 := &toolLoop{finalAfter: 1000, in: 100, out: 10, latency: 400 * time.Millisecond}
	up2 := newUpstream(t, m2.serve)
	g2 := startGateway(t, up2.URL, withPolicy(policyDir(t, `{"haltline":{"terminations":{"mode":"reject"}}}`)))
	client2 := openai.NewClient(option.WithBaseURL(gwURL(g2)+"/v1"), option.WithAPIKey("sk-x"))
	_, err = client2.Chat.Completions.New(context.Background(), params, option.WithHeader("X-Run-Budget", "deadline_ms=300"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 504 {
		t.Fatalf("want a 504, got %v", err)
	}
	if n := counterValue(t, g2, "haltline_model_calls_total", map[string]string{"status": "504"}); n != 1 {
		t.Fatalf("gateway answered %v deadline refusals: the SDK retried", n)
	}
}

// fixedRequest is a chat request of fixed size with a stated max output, so
// that its worst case is known in advance.
func fixedRequest(maxOut int) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-4o-mini","max_completion_tokens":%d,"messages":[{"role":"user","content":"Summarise the report."}]}`, maxOut)
}

func worstCase(t *testing.T, body []byte, maxOut int64) accounting.Money {
	t.Helper()
	price, ok := accounting.DefaultCatalog().Lookup("gpt-4o-mini")
	if !ok {
		t.Fatal("gpt-4o-mini not priced")
	}
	return price.WorstCase(accounting.ReserveInput(contextmgr.Estimate(wire.APIChat, body)), maxOut)
}

func usd(m accounting.Money) string {
	return fmt.Sprintf("%d.%012d", m/accounting.USDUnit, m%accounting.USDUnit)
}

func post(t *testing.T, url string, body []byte, headers map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-agent")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// 50 parallel calls in one run whose cost budget fits 10 worst cases: the
// upstream receives at most 10, and spent never exceeds the budget.
func TestParallelCallsCannotOverspend(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	m := &toolLoop{finalAfter: 0, in: 20, out: 5, gate: gate}
	up := newUpstream(t, m.serve)
	g := startGateway(t, up.URL)
	body := fixedRequest(1000)
	budget := 10 * worstCase(t, body, 1000)
	var ok atomic.Int64
	heldUntilDecided(t, up, gate, 50, func() {
		status, _, _ := post(t, gwURL(g)+"/v1/chat/completions", body, map[string]string{
			"X-Run-Id": "r-parallel", "X-Run-Budget": "max_cost_usd=" + usd(budget)})
		if status == 200 {
			ok.Add(1)
		}
	})
	n := len(up.requests())
	t.Logf("upstream received %d of 50 calls; %d answered 200", n, ok.Load())
	if n > 10 || n == 0 {
		t.Fatalf("upstream received %d calls, budget fits 10", n)
	}
	rec := runRecord(t, g, "r-parallel")
	if accounting.Money(rec.ActualCostPicoUSD) > budget {
		t.Fatalf("spent %d of %d", rec.ActualCostPicoUSD, budget)
	}
}

// Two runs of one team share the team's daily cap (Rego data): together they
// reach the upstream at most as often as the cap fits, and the team's next
// run is stopped at once. An X-Run-Budget cannot raise any limit.
func TestTeamWindowSharedAcrossRuns(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	m := &toolLoop{finalAfter: 0, in: 20, out: 5, gate: gate}
	up := newUpstream(t, m.serve)
	body := fixedRequest(1000)
	budget := 10 * worstCase(t, body, 1000)
	data := fmt.Sprintf(`{"haltline":{"teams":{"red":{"daily":{"max_cost_usd":%s}}},"budgets":{"teams":{"red":{"max_steps":40}}}}}`, usd(budget))
	g := startGateway(t, up.URL, withPolicy(policyDir(t, data)), func(c *config.Config) {
		c.VirtualKeys = map[string]config.Principal{"sk-agent": {Tenant: "acme", Team: "red"}}
		c.Providers.OpenAI.APIKey = "sk-upstream"
	})
	var i atomic.Int64
	heldUntilDecided(t, up, gate, 50, func() {
		post(t, gwURL(g)+"/v1/chat/completions", body, map[string]string{
			"X-Run-Id": fmt.Sprintf("r-team-%d", i.Add(1)%2), "X-Run-Budget": "max_steps=1000"})
	})
	n := len(up.requests())
	t.Logf("upstream received %d of 50 calls from two runs", n)
	if n > 10 || n == 0 {
		t.Fatalf("upstream received %d calls, the team cap fits 10", n)
	}
	for _, id := range []string{"r-team-0", "r-team-1"} {
		if rec := runRecord(t, g, id); rec.MaxSteps != 40 {
			t.Fatalf("X-Run-Budget raised max_steps to %d", rec.MaxSteps)
		}
	}
}

// A team's daily cap in Rego data stops the team's next run at its first
// call, with a final answer.
func TestTeamDailyCapStopsNextRun(t *testing.T) {
	t.Parallel()
	m := &toolLoop{finalAfter: 0, in: 100000, out: 10} // $0.015 a call at gpt-4o-mini prices
	up := newUpstream(t, m.serve)
	data := `{"haltline":{"teams":{"red":{"daily":{"max_cost_usd":0.02}}}}}`
	g := startGateway(t, up.URL, withPolicy(policyDir(t, data)), func(c *config.Config) {
		c.VirtualKeys = map[string]config.Principal{"sk-agent": {Tenant: "acme", Team: "red"}}
		c.Providers.OpenAI.APIKey = "sk-upstream"
	})
	body := fixedRequest(100)
	for i := range 2 {
		if status, _, b := post(t, gwURL(g)+"/v1/chat/completions", body, map[string]string{"X-Run-Id": fmt.Sprintf("r-spend-%d", i)}); status != 200 {
			t.Fatalf("run %d: %d %s", i, status, b)
		}
	}
	status, hdr, resp := post(t, gwURL(g)+"/v1/chat/completions", body, map[string]string{"X-Run-Id": "r-team-next"})
	if status != 200 || hdr.Get("X-Run-Termination") != runstate.ReasonCostBudget || len(up.requests()) != 2 {
		t.Fatalf("next run: %d %q upstream calls %d: %s", status, hdr.Get("X-Run-Termination"), len(up.requests()), resp)
	}
	if !strings.Contains(string(resp), `"finish_reason":"stop"`) {
		t.Fatalf("not a final answer: %s", resp)
	}
}

// A team's daily spend survives a restart: a restart reads the team
// windows' ledgers (not every run's), so the team's next run after it is
// still stopped at once.
func TestTeamDailyCapSurvivesARestart(t *testing.T) {
	t.Parallel()
	m := &toolLoop{finalAfter: 0, in: 100000, out: 10} // $0.015 a call at gpt-4o-mini prices
	up := newUpstream(t, m.serve)
	policies, data := policyDir(t, `{"haltline":{"teams":{"red":{"daily":{"max_cost_usd":0.02}}}}}`), t.TempDir()
	start := func() *app.Gateway {
		return startGateway(t, up.URL, withPolicy(policies), func(c *config.Config) {
			c.VirtualKeys = map[string]config.Principal{"sk-agent": {Tenant: "acme", Team: "red"}}
			c.Providers.OpenAI.APIKey = "sk-upstream"
			c.Store.DataDir = data
		})
	}
	g := start()
	body := fixedRequest(100)
	for i := range 2 {
		if status, _, b := post(t, gwURL(g)+"/v1/chat/completions", body, map[string]string{"X-Run-Id": fmt.Sprintf("r-spend-%d", i)}); status != 200 {
			t.Fatalf("run %d: %d %s", i, status, b)
		}
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	g = start()
	status, hdr, resp := post(t, gwURL(g)+"/v1/chat/completions", body, map[string]string{"X-Run-Id": "r-team-next"})
	if status != 200 || hdr.Get("X-Run-Termination") != runstate.ReasonCostBudget || len(up.requests()) != 2 {
		t.Fatalf("next run after a restart: %d %q upstream calls %d: %s", status, hdr.Get("X-Run-Termination"), len(up.requests()), resp)
	}
}

// A broken policy file on reload leaves the last good policy in force, logs
// the error, and readiness stays ok.
func TestBrokenPolicyReloadKeepsLastGood(t *testing.T) {
	t.Parallel()
	m := &toolLoop{finalAfter: 1000, in: 10, out: 5}
	up := newUpstream(t, m.serve)
	dir := policyDir(t, `{"haltline":{"budgets":{"defaults":{"max_steps":7}}}}`)
	var logs syncBuffer
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL = up.URL
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	cfg.PolicyDir = dir
	g, err := app.Start(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	if err := os.WriteFile(filepath.Join(dir, "broken.rego"), []byte("package haltline.budget\n\nlimits := {"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logs.String(), "broken.rego") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload error logged: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, hdr, _ := post(t, gwURL(g)+"/v1/chat/completions", fixedRequest(10), nil)
	if rec := runRecord(t, g, hdr.Get("X-Run-Id")); rec.MaxSteps != 7 {
		t.Fatalf("max_steps %d: the last good policy is not in force", rec.MaxSteps)
	}
	resp, err := http.Get(adminURL(g) + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// syncBuffer is a log sink written by the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
