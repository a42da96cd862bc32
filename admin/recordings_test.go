package admin_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/haltline/haltline/admin"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
)

// The recording routes answer behind the token and check their input.
func TestRecordingRoutes(t *testing.T) {
	t.Parallel()
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{Pipeline: pipeline.New(pipeline.Options{Policy: pol}), Token: "tok"}))
	t.Cleanup(srv.Close)
	cases := []struct {
		desc, method, path, body string
		token                    bool
		status                   int
	}{
		{"export needs the token", "GET", "/api/v1/recordings", "", false, 401},
		{"export, none recorded", "GET", "/api/v1/recordings?since=24h", "", true, 200},
		{"export, bad since", "GET", "/api/v1/recordings?since=yesterday", "", true, 400},
		{"replay needs the token", "POST", "/api/v1/replay", "{}", false, 401},
		{"replay, nothing to replay", "POST", "/api/v1/replay", `{"data":{"haltline":{"budgets":{"defaults":{"max_steps":3}}}}}`, true, 200},
		{"replay, bad candidate", "POST", "/api/v1/replay", `{"data":{"haltline":{"recordings":{"sample":"all"}}}}`, true, 400},
		{"replay, bad body", "POST", "/api/v1/replay", `{`, true, 400},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, bytes.NewReader([]byte(tc.body)))
			if tc.token {
				req.Header.Set("Authorization", "Bearer tok")
			}
			if tc.method == "POST" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
			}
		})
	}
}
