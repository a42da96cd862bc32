package app

import (
	"net/http"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/store"
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

// The embedded store gets its read cache, and the policy engine its memo,
// as configured; 0 turns either off.
func TestCachesWired(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		cfg := config.Default()
		cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Store.DataDir = t.TempDir()
		if !on {
			cfg.Store.ReadCacheBytes, cfg.PolicyMemoBytes = 0, 0
		}
		g := startGateway(t, cfg)
		_, cached := g.store.(*store.CachedStore)
		mfs, err := g.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		exported := slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool {
			return mf.GetName() == "haltline_store_read_cache_reads_total"
		})
		if cached != on || exported != on {
			t.Errorf("read_cache_bytes %d: cached %t, its metric exported %t", cfg.Store.ReadCacheBytes, cached, exported)
		}
		if got, want := memoBytes(cfg.PolicyMemoBytes), map[bool]int64{true: 8 << 20, false: -1}[on]; got != want {
			t.Errorf("policy_memo_bytes %d: the engine's MemoBytes %d, want %d", cfg.PolicyMemoBytes, got, want)
		}
	}
}
