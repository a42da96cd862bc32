package app

import (
	"net/http"
	"slices"
	"testing"

	"github.com/haltline/haltline/config"
)

// The control plane answers to the names and origins configured, and to
// its listen name when given as one.
func TestAdminAllowListsWired(t *testing.T) {
	t.Parallel()
	if got := adminHosts(config.Admin{Listen: "haltline-admin:9090", AllowedHosts: []string{"console.example"}}); !slices.Equal(got, []string{"console.example", "haltline-admin"}) {
		t.Errorf("hosts for a named listener: %q", got)
	}
	if got := adminHosts(config.Admin{Listen: "0.0.0.0:9090"}); len(got) != 0 {
		t.Errorf("hosts for every address: %q", got)
	}
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Store.DataDir = t.TempDir()
	cfg.Admin.AllowedHosts = []string{"console.example"}
	cfg.Admin.AllowedOrigins = []string{"https://ui.example"}
	g := startGateway(t, cfg)
	for _, tc := range []struct {
		host, origin string
		status       int
	}{
		{"console.example", "", 200},
		{"evil.example", "", 403},
		{"", "https://ui.example", 200},
		{"", "https://evil.example", 403},
	} {
		req, _ := http.NewRequest("GET", "http://"+g.AdminAddr+"/api/v1/runs", nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("Host %q Origin %q: %d, want %d", tc.host, tc.origin, resp.StatusCode, tc.status)
		}
	}
}
