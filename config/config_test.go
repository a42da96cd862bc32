package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.yaml")
	yml := "listen: 127.0.0.1:7000\nproviders:\n  openai: {base_url: http://file.example/v1}\nlimits: {upstream_timeout: 30s}\n"
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc       string
		args       []string
		env        map[string]string
		wantListen string
		wantOpenAI string
	}{
		{"file over defaults", []string{"--config", file}, nil, "127.0.0.1:7000", "http://file.example"},
		{"env over file", []string{"--config", file}, map[string]string{"OPENAI_BASE_URL": "http://env.example/v1/"}, "127.0.0.1:7000", "http://env.example"},
		{"flags over all", []string{"--config", file, "--listen", "127.0.0.1:7100", "--openai-base-url", "http://flag.example"}, map[string]string{"OPENAI_BASE_URL": "http://env.example"}, "127.0.0.1:7100", "http://flag.example"},
		{"defaults", nil, nil, "127.0.0.1:8080", "https://api.openai.com"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			f := NewServeFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c, err := f.Build(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.Listen != tc.wantListen || c.Providers.OpenAI.BaseURL != tc.wantOpenAI {
				t.Fatalf("listen %q openai %q", c.Listen, c.Providers.OpenAI.BaseURL)
			}
		})
	}
}

func TestFileValues(t *testing.T) {
	t.Parallel()
	c := Default()
	err := c.Parse([]byte(`
admin: {listen: 127.0.0.1:9999, token_env: MY_TOKEN, allowed_hosts: [haltline.internal], allowed_origins: ["https://console.example"]}
mcp_servers:
  fs:
    url: http://127.0.0.1:7001/mcp
    tools: {read_file: {level: L0}, delete_file: {level: L2}}
tools:
  search: {url: http://127.0.0.1:7002, level: L0}
virtual_keys:
  sk-red-1: {tenant: acme, team: red, user: alice}
limits: {upstream_timeout: 45s, header_timeout: 5s, max_connections_per_ip: 64}
store: {retention: 168h, read_cache_bytes: 1048576, checkpoint_memory: 8388608}
policy_memo_bytes: 0
`))
	if err != nil {
		t.Fatal(err)
	}
	c.ResolveEnv(env(map[string]string{"MY_TOKEN": "s3cret", "OPENAI_API_KEY": "sk-up"}))
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Admin.Token != "s3cret" || c.Providers.OpenAI.APIKey != "sk-up" {
		t.Fatal("env not resolved")
	}
	if len(c.Admin.AllowedHosts) != 1 || c.Admin.AllowedHosts[0] != "haltline.internal" ||
		len(c.Admin.AllowedOrigins) != 1 || c.Admin.AllowedOrigins[0] != "https://console.example" {
		t.Fatalf("admin %+v", c.Admin)
	}
	if c.MCPServers["fs"].Tools["delete_file"].Level != "L2" || c.VirtualKeys["sk-red-1"].Team != "red" {
		t.Fatalf("parsed %+v", c)
	}
	if c.Limits.UpstreamTimeout != 45*time.Second || c.Limits.MaxBodyBytes != 32<<20 ||
		c.Limits.HeaderTimeout != 5*time.Second || c.Limits.MaxConnectionsPerIP != 64 || c.Limits.MaxConnections != 10000 {
		t.Fatalf("limits %+v", c.Limits)
	}
	if c.Store.Retention != 7*24*time.Hour || c.Store.DataDir != "./haltline-data" || c.Store.ReadCacheBytes != 1<<20 || c.PolicyMemoBytes != 0 ||
		c.Store.CheckpointMemory != 8<<20 || c.Limits.MemoryBytes != 0 {
		t.Fatalf("store %+v, policy memo %d", c.Store, c.PolicyMemoBytes)
	}
	if d := Default(); d.Store.ReadCacheBytes != 32<<20 || d.PolicyMemoBytes != 8<<20 {
		t.Fatalf("default read cache %d, policy memo %d", d.Store.ReadCacheBytes, d.PolicyMemoBytes)
	}
	if Default().Store.Retention != 30*24*time.Hour {
		t.Fatalf("default retention %v", Default().Store.Retention)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Listen = "nope"
	c.Providers.OpenAI.BaseURL = "ftp://x"
	c.Tools = map[string]HTTPTool{"t": {URL: "http://127.0.0.1:1", Level: "L9"}}
	c.VirtualKeys = map[string]Principal{"sk-secret-key": {}}
	c.Store.Sync = "sometimes"
	c.Store.SyncInterval = -time.Second
	c.Store.Retention = 10 * time.Minute
	c.Admin.AllowedHosts = []string{"http://haltline.internal/"}
	c.Admin.AllowedOrigins = []string{"console.example", "https://console.example/ui/"}
	c.Limits.MaxConnections = -1
	c.Limits.HeaderTimeout = 0
	c.Limits.MaxDrainBytes = -1
	c.Store.ReadCacheBytes = -1
	c.PolicyMemoBytes = -1
	c.Store.CheckpointMemory = 4096
	c.Limits.MemoryBytes = 1 << 20
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"listen", "providers.openai.base_url", "tools.t", "virtual_keys.sk-sec", "store.sync:", "store.sync_interval", "store.retention",
		"admin.allowed_hosts", `admin.allowed_origins: "console.example"`, `admin.allowed_origins: "https://console.example/ui/"`,
		"limits.max_connections:", "limits.header_timeout", "limits.max_drain_bytes", "store.read_cache_bytes", "policy_memo_bytes",
		"store.checkpoint_memory", "limits.memory_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "sk-secret-key") {
		t.Error("a key leaked into an error")
	}
}

func TestUnknownKeyRejected(t *testing.T) {
	t.Parallel()
	c := Default()
	if err := c.Parse([]byte("listn: 127.0.0.1:1\n")); err == nil {
		t.Fatal("unknown key accepted")
	}
}
