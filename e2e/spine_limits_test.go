package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// 1c. What the gateway reserves on is validated before anything is
// forwarded: an output cap that is not a positive integer within bounds
// (the model's context window when the catalog knows it), and a body
// nested past the scanner's depth, are a 400 in the provider's own format,
// and the upstream never sees the call.
func TestSpineRefusesBadLimits(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	type api struct {
		route, provider string
		body            func(member string) string
	}
	chat := api{"/v1/chat/completions", "openai", func(m string) string {
		return `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],` + m + `}`
	}}
	responses := api{"/v1/responses", "openai", func(m string) string {
		return `{"model":"gpt-4o","input":"hi",` + m + `}`
	}}
	messages := api{"/v1/messages", "anthropic", func(m string) string {
		return `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],` + m + `}`
	}}
	for _, tc := range []struct {
		desc   string
		api    api
		member string
		want   string // in the error message
	}{
		{"chat max_tokens -5", chat, `"max_tokens":-5`, "max_tokens must be a positive integer"},
		{"chat max_tokens 2.5", chat, `"max_tokens":2.5`, "max_tokens must be a positive integer"},
		{"chat max_completion_tokens abc", chat, `"max_completion_tokens":"abc"`, "max_completion_tokens must be a positive integer"},
		{"chat max_tokens 1e99", chat, `"max_tokens":1e99`, "max_tokens must be a positive integer"},
		{"chat max_tokens past the context window", chat, `"max_tokens":200000`, "exceeds the context window"},
		{"chat deep", chat, `"tools":` + deep, "deeper than"},
		{"responses max_output_tokens 1e12", responses, `"max_output_tokens":1e12`, "max_output_tokens must be a positive integer"},
		{"responses max_output_tokens -5", responses, `"max_output_tokens":-5`, "max_output_tokens must be a positive integer"},
		{"responses deep", responses, `"metadata":{"a":` + deep + `}`, "deeper than"},
		{"messages max_tokens 1e12", messages, `"max_tokens":1e12`, "max_tokens must be a positive integer"},
		{"messages max_tokens abc", messages, `"max_tokens":"abc"`, "max_tokens must be a positive integer"},
		{"messages deep", messages, `"max_tokens":10,"tools":` + deep, "deeper than"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { writeJSON(w, 500, []byte(`{}`)) })
			g := startGateway(t, up.URL)
			hdr := map[string]string{"Authorization": "Bearer sk-agent-test", "Anthropic-Version": "2023-06-01"}
			resp, b := spPost(t, g, tc.api.route, hdr, []byte(tc.api.body(tc.member)))
			if resp.StatusCode != 400 || !strings.Contains(string(b), tc.want) {
				t.Fatalf("status %d body %.300s, want 400 saying %q", resp.StatusCode, b, tc.want)
			}
			spCheckErrorFormat(t, tc.api.provider, b)
			if !strings.Contains(string(b), "invalid_request_error") {
				t.Fatalf("error type is not invalid_request_error: %.300s", b)
			}
			if n := len(up.requests()); n != 0 {
				t.Fatalf("the upstream saw %d calls", n)
			}
		})
	}
}
