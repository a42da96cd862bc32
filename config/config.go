package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/haltline/haltline/store"
)

// Config is gateway.yaml. Every key is optional.
type Config struct {
	// Listen is the data plane's address (model and tool routes).
	Listen string `yaml:"listen"`
	// Admin is the control plane: runs API, metrics, health, UI.
	Admin Admin `yaml:"admin"`
	// ExtProcListen, when set, starts the Envoy ext_proc gRPC server there.
	ExtProcListen string `yaml:"extproc_listen"`
	// Providers are the upstream model APIs.
	Providers Providers `yaml:"providers"`
	// MCPServers are the MCP servers reachable at /mcp/{name}.
	MCPServers map[string]MCPServer `yaml:"mcp_servers"`
	// Tools are plain HTTP tools: /tools/{name}/x is forwarded to <url>/x.
	Tools map[string]HTTPTool `yaml:"tools"`
	// VirtualKeys are the agent-facing keys. With them the provider keys
	// come from providers.*, and the agent's key is never forwarded.
	VirtualKeys map[string]Principal `yaml:"virtual_keys"`
	// PolicyDir holds *.rego and data.json that override the embedded
	// policies; reloaded on change.
	PolicyDir string `yaml:"policy_dir"`
	// PolicyMemoBytes bounds the memoised policy answers of a loaded
	// policy set (default 8 MiB; 0: every question is evaluated).
	PolicyMemoBytes int64 `yaml:"policy_memo_bytes"`
	// Prices is a price catalog file that replaces the embedded one.
	Prices string `yaml:"prices"`
	// Store says where runs and ledgers live.
	Store Store `yaml:"store"`
	// Limits bound what the gateway accepts and waits for.
	Limits Limits `yaml:"limits"`
	// Log selects the log format: "json" (default) or "text".
	Log Log `yaml:"log"`
	// Telemetry turns tracing on.
	Telemetry Telemetry `yaml:"telemetry"`
}

// Telemetry configures OpenTelemetry tracing; off by default.
type Telemetry struct {
	// OTLPEndpoint is an OTLP/HTTP collector URL, e.g. http://otel:4318
	// (the signal path /v1/traces is added when the URL has no path). When
	// empty, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then
	// OTEL_EXPORTER_OTLP_ENDPOINT, are used; with none, tracing is off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
}

// Admin is the control plane listener.
type Admin struct {
	Listen string `yaml:"listen"`
	// TokenEnv names the environment variable holding the bearer token that
	// every /api/v1/* route then requires.
	TokenEnv string `yaml:"token_env"`
	// Token is resolved from TokenEnv at load; never read from the file.
	Token string `yaml:"-"`
	// AllowedHosts are the names, besides IP literals, localhost and the
	// listen name, that the control plane answers to in the Host header
	// ("haltline.example.com" at any port, or "haltline.example.com:9090").
	// Any other name is refused with 403 (DNS rebinding), except on
	// /healthz, /readyz and /metrics. Listening on 0.0.0.0 behind a Service
	// or ingress name, list that name here to use the UI and API through it.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowedOrigins are the origins (scheme://host[:port]) besides the
	// control plane's own whose pages may call it, e.g. a UI served behind
	// a TLS proxy under another name. Any other Origin is refused with 403.
	AllowedOrigins []string `yaml:"allowed_origins"`
}

// Providers are the model upstreams.
type Providers struct {
	OpenAI    Provider `yaml:"openai"`
	Anthropic Provider `yaml:"anthropic"`
}

// Provider is one upstream model API.
type Provider struct {
	// BaseURL without /v1: the gateway appends the path it received.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the provider key.
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKey is resolved from APIKeyEnv; never read from the file.
	APIKey string `yaml:"-"`
}

// MCPServer is one MCP server behind /mcp/{name}.
type MCPServer struct {
	URL   string              `yaml:"url"`
	Tools map[string]ToolSpec `yaml:"tools"`
	// Headers are injected when forwarding (credentials by handle): values
	// of the form ${ENV} are read from the environment.
	Headers map[string]string `yaml:"headers"`
}

// ToolSpec declares a tool's danger level.
type ToolSpec struct {
	Level string `yaml:"level"`
	// CostUSD is charged to the run for each call, if set.
	CostUSD float64 `yaml:"cost_usd"`
}

// HTTPTool is one plain HTTP tool behind /tools/{name}/.
type HTTPTool struct {
	URL     string            `yaml:"url"`
	Level   string            `yaml:"level"`
	Headers map[string]string `yaml:"headers"`
	// CostUSD is charged to the run for each call, if set.
	CostUSD float64 `yaml:"cost_usd"`
}

// Principal is who a virtual key belongs to.
type Principal struct {
	Tenant string `yaml:"tenant"`
	Team   string `yaml:"team"`
	User   string `yaml:"user"`
}

// Store selects the persistence backend.
type Store struct {
	// DataDir holds the embedded store's bbolt file.
	DataDir string `yaml:"data_dir"`
	// RedisURL selects the shared Redis store for several replicas.
	RedisURL string `yaml:"redis_url"`
	// RedisPrefix prefixes every Redis key (default "haltline:"), so that
	// several gateways can share one Redis.
	RedisPrefix string `yaml:"redis_prefix"`
	// Sync is when the embedded store acknowledges a write: "interval"
	// (default: once the kernel holds it, which a process crash or restart
	// cannot lose; fsynced every SyncInterval, which bounds a power loss) or
	// "always" (once fsynced).
	Sync string `yaml:"sync"`
	// SyncInterval is the fsync period of "interval" (default 100ms).
	SyncInterval time.Duration `yaml:"sync_interval"`
	// CheckpointMemory bounds the memory, in bytes, held by the embedded
	// store's writes not yet checkpointed into its bbolt file: a
	// checkpoint starts once they pass it, before its period (default
	// 16 MiB, at least 1 MiB).
	CheckpointMemory int64 `yaml:"checkpoint_memory"`
	// Retention is how long a run is kept after it ended (default 720h,
	// 30 days); 0 keeps every run.
	Retention time.Duration `yaml:"retention"`
	// ReadCacheBytes bounds the embedded store's read cache of run
	// snapshots, lineage keys and stored tool outputs (default 32 MiB;
	// 0: off). A Redis store is never cached: other replicas write it.
	ReadCacheBytes int64 `yaml:"read_cache_bytes"`
}

// Limits bound sizes and waits.
type Limits struct {
	// MemoryBytes is the Go runtime's soft memory limit
	// (runtime/debug.SetMemoryLimit): the collector works harder as the
	// process nears it. 0 (the default) takes GOMEMLIMIT when set, else
	// 90 % of the container's memory limit (cgroup memory.max) when there
	// is one, else none. At least 64 MiB when set.
	MemoryBytes int64 `yaml:"memory_bytes"`
	// MaxBodyBytes bounds a request body (413 beyond); default 32 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxBodyBytesInFlight bounds the bytes of model-call request bodies
	// held at once (default 256 MiB; 0: no bound): under overload, calls
	// past it wait up to BodyWait with their body unread, then are
	// answered 503 (Anthropic: overloaded_error) with Retry-After.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
	// BodyWait bounds that wait (default 2 s).
	BodyWait time.Duration `yaml:"body_wait"`
	// MaxResponseBytes bounds a buffered (non-streamed) upstream response.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// UpstreamTimeout bounds one upstream call; the run's deadline may cut it shorter.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`
	// ReservationLease is how long a reservation lives without news from its call.
	ReservationLease time.Duration `yaml:"reservation_lease"`

	// MaxConnections bounds the data plane's open client connections
	// (default 10,000; 0: no bound). A connection past it is answered 503
	// with Connection: close at once, without reading it. Keep it under
	// the process's open-file limit, with room for the upstream
	// connections (one per call in flight): past that limit, accepting
	// fails until descriptors are free again (the gateway retries, and
	// /readyz answers 503 meanwhile).
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP bounds the open connections from one client
	// address (default 0: no bound), refused like those past
	// MaxConnections. Off by default because a sidecar sees every agent
	// as 127.0.0.1; set it when many hosts share one gateway.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
	// HeaderTimeout bounds the reading of a request's headers: from the
	// connection's opening for its first request, from the first byte for
	// later ones (default 10 s). A client that trickles its headers is
	// answered 408 and closed.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// BodyTimeout bounds the reading of a request's body, counted from the
	// end of its headers (default 60 s). It also bounds the discarding of
	// a refused body (MaxDrainBytes).
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request (default 75 s: longer than the 60 s idle timeout of the
	// common load balancers, so the gateway is not the side that closes a
	// connection a balancer is about to reuse).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxDrainBytes is how much of a refused request's unread body (too
	// large, unknown key, overload) is read and dropped before the answer,
	// so that the client, still sending, reads the refusal instead of a
	// connection reset (default 128 MiB; 0: close at once). A body
	// announced larger is not read: its connection is closed.
	MaxDrainBytes int64 `yaml:"max_drain_bytes"`
}

// Log selects the log output.
type Log struct {
	Format string `yaml:"format"`
	Level  string `yaml:"level"`
}

// Default is the configuration with no file and no flags.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:8080",
		Admin:  Admin{Listen: "127.0.0.1:9090", TokenEnv: "HALTLINE_ADMIN_TOKEN"},
		Providers: Providers{
			OpenAI:    Provider{BaseURL: "https://api.openai.com", APIKeyEnv: "OPENAI_API_KEY"},
			Anthropic: Provider{BaseURL: "https://api.anthropic.com", APIKeyEnv: "ANTHROPIC_API_KEY"},
		},
		PolicyMemoBytes: 8 << 20,
		Store: Store{DataDir: "./haltline-data", Sync: "interval", SyncInterval: 100 * time.Millisecond, Retention: 720 * time.Hour,
			ReadCacheBytes: 32 << 20, CheckpointMemory: store.DefaultCheckpointMemory},
		Limits: Limits{
			MaxBodyBytes:         32 << 20,
			MaxBodyBytesInFlight: 256 << 20,
			BodyWait:             2 * time.Second,
			MaxResponseBytes:     64 << 20,
			UpstreamTimeout:      10 * time.Minute,
			ReservationLease:     15 * time.Minute,
			MaxConnections:       10000,
			HeaderTimeout:        10 * time.Second,
			BodyTimeout:          60 * time.Second,
			IdleTimeout:          75 * time.Second,
			MaxDrainBytes:        128 << 20,
		},
		Log: Log{Format: "json", Level: "info"},
	}
}

// Parse reads YAML over c. Unknown keys are errors, so a typo never goes
// unnoticed.
func (c *Config) Parse(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data), yaml.DisallowUnknownField())
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Load reads a file over c.
func (c *Config) Load(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := c.Parse(data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// ResolveEnv fills what comes from the environment: upstream base URLs
// (OPENAI_BASE_URL, ANTHROPIC_BASE_URL; they override the file's, as the SDKs
// do), provider keys and the admin token. SDK-style base URLs ending in /v1
// are accepted and trimmed.
func (c *Config) ResolveEnv(getenv func(string) string) {
	if v := getenv("OPENAI_BASE_URL"); v != "" {
		c.Providers.OpenAI.BaseURL = v
	}
	if v := getenv("ANTHROPIC_BASE_URL"); v != "" {
		c.Providers.Anthropic.BaseURL = v
	}
	for _, p := range []*Provider{&c.Providers.OpenAI, &c.Providers.Anthropic} {
		p.BaseURL = strings.TrimSuffix(strings.TrimRight(p.BaseURL, "/"), "/v1")
		if p.APIKeyEnv != "" {
			p.APIKey = getenv(p.APIKeyEnv)
		}
	}
	if c.Admin.TokenEnv != "" {
		c.Admin.Token = getenv(c.Admin.TokenEnv)
	}
	for _, env := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := getenv(env); c.Telemetry.OTLPEndpoint == "" && v != "" {
			c.Telemetry.OTLPEndpoint = v
		}
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	addr := func(name, v string, required bool) {
		if v == "" {
			if required {
				errs = append(errs, fmt.Errorf("%s: required", name))
			}
			return
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not host:port", name, v))
		}
	}
	urlOK := func(name, v string) {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not an http(s) URL", name, v))
		}
	}
	level := func(name, v string) {
		switch v {
		case "", "L0", "L1", "L2":
		default:
			errs = append(errs, fmt.Errorf("%s: level %q is not L0, L1 or L2", name, v))
		}
	}
	addr("listen", c.Listen, true)
	addr("admin.listen", c.Admin.Listen, true)
	addr("extproc_listen", c.ExtProcListen, false)
	for _, h := range c.Admin.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			errs = append(errs, fmt.Errorf("admin.allowed_hosts: %q is not a host name or host:port", h))
		}
	}
	for _, o := range c.Admin.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			strings.TrimRight(u.Path, "/") != "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("admin.allowed_origins: %q is not scheme://host[:port]", o))
		}
	}
	urlOK("providers.openai.base_url", c.Providers.OpenAI.BaseURL)
	urlOK("providers.anthropic.base_url", c.Providers.Anthropic.BaseURL)
	for name, s := range c.MCPServers {
		urlOK("mcp_servers."+name+".url", s.URL)
		for tool, spec := range s.Tools {
			level("mcp_servers."+name+".tools."+tool, spec.Level)
		}
	}
	for name, t := range c.Tools {
		urlOK("tools."+name+".url", t.URL)
		level("tools."+name, t.Level)
	}
	for key, p := range c.VirtualKeys {
		if p.Tenant == "" {
			errs = append(errs, fmt.Errorf("virtual_keys.%s: tenant is required", redactKey(key)))
		}
	}
	if c.Store.DataDir == "" && c.Store.RedisURL == "" {
		errs = append(errs, errors.New("store: data_dir or redis_url is required"))
	}
	if c.Store.RedisURL != "" {
		if u, err := url.Parse(c.Store.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			errs = append(errs, fmt.Errorf("store.redis_url: not a redis:// URL"))
		}
	}
	if _, err := store.ParseSync(c.Store.Sync); err != nil {
		errs = append(errs, fmt.Errorf("store.sync: %w", err))
	}
	if c.Store.SyncInterval < 0 {
		errs = append(errs, errors.New("store.sync_interval: must be positive"))
	}
	if c.Store.CheckpointMemory < 1<<20 {
		errs = append(errs, errors.New("store.checkpoint_memory: must be at least 1 MiB (1048576)"))
	}
	if c.Limits.MemoryBytes != 0 && c.Limits.MemoryBytes < 64<<20 {
		errs = append(errs, errors.New("limits.memory_bytes: must be 0 (from GOMEMLIMIT or the container's limit) or at least 64 MiB (67108864)"))
	}
	if c.Store.Retention < 0 || (c.Store.Retention > 0 && c.Store.Retention < time.Hour) {
		errs = append(errs, errors.New("store.retention: must be 0 (keep every run) or at least 1h"))
	}
	if c.Store.ReadCacheBytes < 0 {
		errs = append(errs, errors.New("store.read_cache_bytes: must be 0 (off) or positive"))
	}
	if c.PolicyMemoBytes < 0 {
		errs = append(errs, errors.New("policy_memo_bytes: must be 0 (off) or positive"))
	}
	if c.Limits.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("limits.max_body_bytes: must be positive"))
	}
	if c.Limits.MaxResponseBytes <= 0 {
		errs = append(errs, errors.New("limits.max_response_bytes: must be positive"))
	}
	if c.Limits.UpstreamTimeout <= 0 {
		errs = append(errs, errors.New("limits.upstream_timeout: must be positive"))
	}
	if c.Limits.MaxBodyBytesInFlight < 0 {
		errs = append(errs, errors.New("limits.max_body_bytes_in_flight: must not be negative (0: no bound)"))
	}
	if c.Limits.MaxBodyBytesInFlight > 0 && c.Limits.BodyWait <= 0 {
		errs = append(errs, errors.New("limits.body_wait: must be positive"))
	}
	if c.Limits.ReservationLease <= 0 {
		errs = append(errs, errors.New("limits.reservation_lease: must be positive"))
	}
	if c.Limits.MaxConnections < 0 {
		errs = append(errs, errors.New("limits.max_connections: must not be negative (0: no bound)"))
	}
	if c.Limits.MaxConnectionsPerIP < 0 {
		errs = append(errs, errors.New("limits.max_connections_per_ip: must not be negative (0: no bound)"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"header_timeout", c.Limits.HeaderTimeout}, {"body_timeout", c.Limits.BodyTimeout}, {"idle_timeout", c.Limits.IdleTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("limits.%s: must be positive", d.name))
		}
	}
	if c.Limits.MaxDrainBytes < 0 {
		errs = append(errs, errors.New("limits.max_drain_bytes: must not be negative (0: never drain)"))
	}
	if c.Telemetry.OTLPEndpoint != "" {
		urlOK("telemetry.otlp_endpoint", c.Telemetry.OTLPEndpoint)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not json or text", c.Log.Format))
	}
	return errors.Join(errs...)
}

// redactKey keeps a key's prefix only: keys are secrets.
func redactKey(k string) string {
	if len(k) > 6 {
		return k[:6] + "…"
	}
	return "…"
}

// ServeFlags are the flags of `gateway serve`.
type ServeFlags struct {
	fs     *flag.FlagSet
	Config string
	values map[string]*string
}

var serveFlagNames = []struct{ name, usage string }{
	{"listen", "data plane address"},
	{"admin-listen", "control plane address"},
	{"extproc-listen", "Envoy ext_proc gRPC address (off when empty)"},
	{"openai-base-url", "OpenAI-compatible upstream base URL"},
	{"anthropic-base-url", "Anthropic upstream base URL"},
	{"policy-dir", "directory of Rego policies and data.json"},
	{"prices", "price catalog file"},
	{"data-dir", "embedded store directory"},
	{"redis-url", "Redis URL for the shared store"},
	{"store-sync", "when the embedded store acknowledges a write: interval (default) or always (fsync first)"},
}

// NewServeFlags registers the serve flags on fs.
func NewServeFlags(fs *flag.FlagSet) *ServeFlags {
	f := &ServeFlags{fs: fs, values: map[string]*string{}}
	fs.StringVar(&f.Config, "config", "", "YAML configuration file")
	for _, n := range serveFlagNames {
		f.values[n.name] = fs.String(n.name, "", n.usage)
	}
	return f
}

// Build returns defaults < file < environment < flags, validated.
func (f *ServeFlags) Build(getenv func(string) string) (Config, error) {
	c := Default()
	if f.Config != "" {
		if err := c.Load(f.Config); err != nil {
			return c, err
		}
	}
	c.ResolveEnv(getenv)
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	apply := func(name string, dst *string) {
		if set[name] {
			*dst = *f.values[name]
		}
	}
	apply("listen", &c.Listen)
	apply("admin-listen", &c.Admin.Listen)
	apply("extproc-listen", &c.ExtProcListen)
	apply("openai-base-url", &c.Providers.OpenAI.BaseURL)
	apply("anthropic-base-url", &c.Providers.Anthropic.BaseURL)
	apply("policy-dir", &c.PolicyDir)
	apply("prices", &c.Prices)
	apply("data-dir", &c.Store.DataDir)
	apply("redis-url", &c.Store.RedisURL)
	apply("store-sync", &c.Store.Sync)
	for _, p := range []*Provider{&c.Providers.OpenAI, &c.Providers.Anthropic} {
		p.BaseURL = strings.TrimSuffix(strings.TrimRight(p.BaseURL, "/"), "/v1")
	}
	return c, c.Validate()
}
