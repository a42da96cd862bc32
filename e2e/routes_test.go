package e2e

import (
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/haltline/haltline/runstate"
)

// TestProviderRoutesWithoutV1 calls each provider route the way a client
// with /v1 left out of its base URL (or put in, for the Anthropic SDKs that
// post to {base}/messages) calls it: the call is governed as a model call
// and reaches the provider on its /v1 path (docs/design.md §2).
func TestProviderRoutesWithoutV1(t *testing.T) {
	cases := []struct {
		route, fixture string
		hdr            map[string]string
		body           []byte
	}{
		{"/chat/completions", "openai-chat/response-usage-cache-hit.json",
			map[string]string{"Authorization": "Bearer sk-agent-test"}, spChatBody(false, "")},
		{"/responses", "openai-responses/response-usage-cache-hit.json",
			map[string]string{"Authorization": "Bearer sk-agent-test"}, []byte(`{"model":"gpt-4o","input":"Say 2."}`)},
		{"/messages", "anthropic/response-tool-use-cache-write.json",
			map[string]string{"x-api-key": "sk-ant-agent-test", "anthropic-version": "2023-06-01"}, spMessagesBody(false)},
	}
	for _, c := range cases {
		t.Run(c.route, func(t *testing.T) {
			up := newUpstream(t, spServeFixture(t, c.fixture))
			g := startGateway(t, up.URL)
			resp, body := spPost(t, g, c.route, c.hdr, c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("POST %s: %d %s", c.route, resp.StatusCode, body)
			}
			spCheckRunHeaders(t, resp.Header, "1")
			reqs := up.requests()
			if len(reqs) != 1 || reqs[0].Path != "/v1"+c.route {
				t.Fatalf("upstream saw %+v, want one call to /v1%s", reqs, c.route)
			}
		})
	}
}

// TestModelsForwardedWithoutV1: the model list a client reads before its
// first call passes through to the provider's /v1/models.
func TestModelsForwardedWithoutV1(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, []byte(`{"object":"list","data":[{"id":"gpt-4o","object":"model"}]}`))
	})
	g := startGateway(t, up.URL)
	for _, route := range []string{"/models", "/v1/models", "/models/gpt-4o"} {
		req, _ := http.NewRequest(http.MethodGet, gwURL(g)+route, nil)
		req.Header.Set("Authorization", "Bearer sk-agent-test")
		resp, err := spClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", route, resp.StatusCode)
		}
	}
	want := []string{"/v1/models", "/v1/models", "/v1/models/gpt-4o"}
	reqs := up.requests()
	if len(reqs) != len(want) {
		t.Fatalf("upstream saw %d requests, want %d", len(reqs), len(want))
	}
	for i, r := range reqs {
		if r.Path != want[i] {
			t.Errorf("request %d reached %s, want %s", i, r.Path, want[i])
		}
	}
}

// TestEventStepsMatchRunStep: the model call events of a run's timeline
// carry the step its answers named in X-Run-Step, the first call step 1.
func TestEventStepsMatchRunStep(t *testing.T) {
	loop := &toolLoop{finalAfter: 100, in: 10, out: 5}
	up := newUpstream(t, loop.serve)
	g := startGateway(t, up.URL)
	hdr := map[string]string{"Authorization": "Bearer sk-agent-test", "X-Run-Id": "r-steps"}
	var want []int64
	for range 3 {
		resp, body := spPost(t, g, "/v1/chat/completions", hdr, []byte(
			`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Read."}],"tools":[{"type":"function","function":{"name":"read_page","parameters":{"type":"object"}}}]}`))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		n, err := strconv.ParseInt(resp.Header.Get("X-Run-Step"), 10, 64)
		if err != nil {
			t.Fatalf("X-Run-Step %q", resp.Header.Get("X-Run-Step"))
		}
		want = append(want, n)
	}
	var evs struct {
		Events []runstate.Event `json:"events"`
	}
	getJSON(t, adminURL(g)+"/api/v1/runs/r-steps/events", &evs)
	var got []int64
	for _, e := range evs.Events {
		if e.Type == runstate.EventModelCall {
			got = append(got, e.Step)
		}
	}
	if !slices.Equal(got, want) || want[0] != 1 {
		t.Fatalf("model call events at steps %v, answers' X-Run-Step %v (the first is step 1)", got, want)
	}
}
