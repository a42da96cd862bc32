package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/haltline/haltline/runstate"
)

// spMetric is the value of the series of family name whose labels include
// want; ok is false when there is no such series.
func spMetric(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// 8. After runs, /metrics on the control plane counts the model calls and
// the metered tokens exactly, and the haltline_ metrics pass promlint.
func TestSpineMetrics(t *testing.T) {
	t.Parallel()
	m := &toolLoop{finalAfter: 1, in: 1234, out: 56}
	notFound := fixture(t, "openai-chat/error-404-model-not-found.json")
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), "gpt-4.1-nano-wrong") {
			writeJSON(w, 404, notFound)
			return
		}
		m.serve(w, r, body)
	})
	g := startGateway(t, up.URL)

	// Two runs of two steps each: openai non-streamed, anthropic streamed.
	oaRun, oaSteps, _, _ := openaiAgent(t, openaiClient(g), false, 5)
	anRun, anSteps, _, _ := anthropicAgent(t, anthropicClient(g), true, 5)
	if oaSteps != 2 || anSteps != 2 {
		t.Fatalf("steps %d and %d, want 2 and 2", oaSteps, anSteps)
	}
	for _, id := range []string{oaRun, anRun} {
		if rec := settledRecord(t, g, id); rec.Status != runstate.Completed {
			t.Fatalf("run %s %q", id, rec.Status)
		}
	}
	// And one call the upstream refuses.
	c := openaiClient(g)
	if _, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "gpt-4.1-nano-wrong",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi.")}}); err == nil {
		t.Fatal("the upstream's 404 did not reach the client")
	}

	resp, err := http.Get(adminURL(g) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, tc := range []struct {
		desc   string
		name   string
		labels map[string]string
		want   float64
	}{
		{"openai chat calls", "haltline_model_calls_total", map[string]string{"api": "openai.chat", "status": "200"}, 2},
		{"openai chat refused call", "haltline_model_calls_total", map[string]string{"api": "openai.chat", "status": "404"}, 1},
		{"anthropic calls", "haltline_model_calls_total", map[string]string{"api": "anthropic.messages", "status": "200"}, 2},
		{"openai input tokens", "haltline_tokens_total", map[string]string{"provider": "openai", "model": "gpt-4o-mini", "type": "input"}, 2 * 1234},
		{"openai output tokens", "haltline_tokens_total", map[string]string{"provider": "openai", "model": "gpt-4o-mini", "type": "output"}, 2 * 56},
		{"anthropic input tokens", "haltline_tokens_total", map[string]string{"provider": "anthropic", "model": "claude-haiku-4-5", "type": "input"}, 2 * 1234},
		{"anthropic output tokens", "haltline_tokens_total", map[string]string{"provider": "anthropic", "model": "claude-haiku-4-5", "type": "output"}, 2 * 56},
		{"anthropic cached tokens", "haltline_tokens_total", map[string]string{"provider": "anthropic", "model": "claude-haiku-4-5", "type": "cached"}, 0},
	} {
		got, ok := spMetric(mfs, tc.name, tc.labels)
		if !ok || got != tc.want {
			t.Errorf("%s: %s%v = %v (present %t), want %v", tc.desc, tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if v, ok := spMetric(mfs, "haltline_cost_usd_total", map[string]string{"provider": "openai", "model": "gpt-4o-mini"}); !ok || v <= 0 {
		t.Errorf("haltline_cost_usd_total for gpt-4o-mini = %v (present %t)", v, ok)
	}

	// promlint, as testutil.GatherAndLint does (testutil itself needs a
	// module that go.sum does not hold), on the haltline_ metrics only.
	gathered, err := g.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(gathered).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "haltline_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}
