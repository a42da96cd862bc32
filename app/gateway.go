package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/accounting/redisbook"
	"github.com/haltline/haltline/admin"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/extproc"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/proxy"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/store/redisstore"
	"github.com/haltline/haltline/telemetry"
)

// Gateway is a running gateway: data plane and control plane.
type Gateway struct {
	DataAddr  string
	AdminAddr string
	// ExtProcAddr is the Envoy ext_proc gRPC address; "" when off.
	ExtProcAddr string
	Pipeline    *pipeline.Pipeline
	Policy      *policy.Engine
	Registry    *prometheus.Registry

	data    *proxy.Server
	extproc *extproc.Server // nil when off
	store   store.Store
	obs     *telemetry.Observer
	admin   *http.Server
	cancel  context.CancelFunc
	done    chan struct{}
	// restoring is the rebuilding of unfinished runs a start leaves running.
	restoring *pipeline.Restoring
}

// Start builds the gateway from cfg and starts serving. It returns once both
// listeners accept connections.
func Start(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (*Gateway, error) {
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	catalog := accounting.DefaultCatalog()
	if cfg.Prices != "" {
		c, err := accounting.LoadCatalog(cfg.Prices)
		if err != nil {
			return nil, fmt.Errorf("prices: %w", err)
		}
		catalog = c
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := telemetry.New(reg)
	pol, err := policy.New(bg, policy.Options{
		Dir:    cfg.PolicyDir,
		Data:   registryData(cfg),
		Logger: log,
		// Each decision's count and evaluation time, and a debug line.
		DecisionLog:       telemetry.NewObserver(metrics, nil, log).PolicyDecision,
		DecisionSummaries: log.Enabled(ctx, slog.LevelDebug),
		MemoBytes:         memoBytes(cfg.PolicyMemoBytes),
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("policy: %w", err)
	}
	if cfg.PolicyDir != "" {
		go pol.Watch(bg, 2*time.Second)
	}
	st, book, runLock, err := openStore(cfg.Store, log)
	if err != nil {
		cancel()
		return nil, err
	}
	tracer, err := telemetry.NewTracer(bg, telemetry.TraceOptions{Endpoint: cfg.Telemetry.OTLPEndpoint, Exporter: o.spanExporter})
	if err != nil {
		st.Close()
		cancel()
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	obs := telemetry.NewObserver(metrics, tracer, log)
	p := pipeline.New(pipeline.Options{
		Policy: pol, Catalog: catalog, Observer: obs, Logger: log, Store: st, Book: book, RunLock: runLock,
		UpstreamTimeout: cfg.Limits.UpstreamTimeout, Lease: cfg.Limits.ReservationLease, StoreRetention: cfg.Store.Retention,
		StoreRecovered: recovered(st),
		Context:        &contextmgr.Rewriter{},
	})
	if err := errors.Join(telemetry.RegisterRunStates(reg, p.Runs().Count), telemetry.RegisterGCPauses(reg)); err != nil {
		st.Close()
		cancel()
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if c, ok := st.(*store.CachedStore); ok {
		if err := telemetry.RegisterStoreReadCache(reg, c.Hits, c.Misses); err != nil {
			st.Close()
			cancel()
			return nil, fmt.Errorf("telemetry: %w", err)
		}
	}
	g := &Gateway{Pipeline: p, Policy: pol, Registry: reg, cancel: cancel, done: make(chan struct{}), store: st, obs: obs}
	g.data = proxy.New(proxy.Options{
		Pipeline: p, OpenAI: cfg.Providers.OpenAI, Anthropic: cfg.Providers.Anthropic,
		VirtualKeys: cfg.VirtualKeys, Limits: cfg.Limits, Logger: log,
		MCPServers: cfg.MCPServers, Tools: cfg.Tools,
	})
	g.data.DeclareTools() // tool levels known to model responses before any tool route is used
	dl, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		st.Close()
		cancel()
		return nil, fmt.Errorf("listen: %w", err)
	}
	al, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		dl.Close()
		st.Close()
		cancel()
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	var el net.Listener
	if cfg.ExtProcListen != "" {
		if el, err = net.Listen("tcp", cfg.ExtProcListen); err != nil {
			dl.Close()
			al.Close()
			st.Close()
			cancel()
			return nil, fmt.Errorf("extproc listen: %w", err)
		}
		// Same providers, keys and limits as the proxy: one behaviour.
		g.extproc = extproc.New(extproc.Options{
			Pipeline: p, OpenAI: cfg.Providers.OpenAI, Anthropic: cfg.Providers.Anthropic,
			Credentials: proxy.Credentials(cfg.VirtualKeys), Limits: cfg.Limits, Logger: log,
		})
		g.ExtProcAddr = el.Addr().String()
	}
	g.DataAddr, g.AdminAddr = dl.Addr().String(), al.Addr().String()
	p.ToolRegistry().SetBlobBaseURL("http://" + g.AdminAddr) // the link in a cut tool result
	g.admin = &http.Server{
		Handler: admin.Handler(admin.Options{Pipeline: p, Gatherer: reg, Token: cfg.Admin.Token, Logger: log,
			Ready: func() error { return errors.Join(st.Healthy(), g.data.Ready()) }, Listen: g.AdminAddr,
			AllowedHosts: adminHosts(cfg.Admin), AllowedOrigins: cfg.Admin.AllowedOrigins}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
	}
	// Budgets are whole before the first call; unfinished runs come back
	// in the background, each loaded by its first call if that is sooner.
	started := time.Now()
	if g.restoring, err = p.StartRestore(bg); err != nil {
		dl.Close()
		al.Close()
		if el != nil {
			el.Close()
		}
		st.Close()
		cancel()
		return nil, fmt.Errorf("restore from %s: %w", cfg.Store.DataDir, err)
	}
	go func() {
		n, err := g.restoring.Wait()
		if err != nil && bg.Err() == nil { // not cut short by Close
			log.Error("runs left in the store: not restored", "err", err)
		}
		log.Info("runs restored", "runs", n, "ms", time.Since(started).Milliseconds())
	}()
	go p.RunSweeper(bg, sweepEvery)
	go func() {
		defer close(g.done)
		n := 2
		errc := make(chan error, 3)
		go func() { errc <- g.data.Serve(dl) }()
		go func() { errc <- g.admin.Serve(al) }()
		if g.extproc != nil {
			n++
			go func() { errc <- g.extproc.Serve(el) }()
		}
		for range n {
			if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("listener stopped", "err", err)
			}
		}
	}()
	log.Info("gateway started", "listen", g.DataAddr, "admin", g.AdminAddr, "extproc", g.ExtProcAddr,
		"openai", cfg.Providers.OpenAI.BaseURL, "anthropic", cfg.Providers.Anthropic.BaseURL)
	return g, nil
}

// Close drains calls in flight until ctx ends, then stops.
func (g *Gateway) Close(ctx context.Context) error {
	err := errors.Join(g.data.Shutdown(ctx), g.admin.Shutdown(ctx))
	if g.extproc != nil {
		err = errors.Join(err, g.extproc.Shutdown(ctx))
	}
	g.cancel() // stops the rebuilding of unfinished runs too
	select {
	case <-g.done:
	case <-ctx.Done():
	}
	<-g.restoring.Done() // it reads the store: before the store closes
	// Open spans end and the exporter flushes once no call is in flight.
	g.Pipeline.SaveUnsaved() // a call the drain left in flight
	g.Pipeline.SaveOwned()
	return errors.Join(err, g.obs.Shutdown(ctx), g.store.Close())
}

// registryData is the tool registry declared in config, for
// data.haltline.tools (docs/design.md §10).
func registryData(cfg config.Config) map[string]any {
	tools := map[string]any{}
	for name, s := range cfg.MCPServers {
		m := map[string]any{}
		for tool, spec := range s.Tools {
			m[tool] = map[string]any{"level": spec.Level}
		}
		tools[name] = m
	}
	if len(cfg.Tools) > 0 {
		m := map[string]any{}
		for name, t := range cfg.Tools {
			m[name] = map[string]any{"level": t.Level}
		}
		tools[""] = m
	}
	return map[string]any{"tools": tools}
}

// openStore opens the embedded store (a bbolt file, ledgers in memory), or
// with a Redis URL the shared one: ledgers, runs and the lineage index in
// Redis, and a lock per run so several replicas move a run one at a time.
// log takes the embedded store's warning of a torn log tail it cut off.
func openStore(c config.Store, log *slog.Logger) (store.Store, accounting.Book, pipeline.RunLock, error) {
	if c.RedisURL != "" {
		st, err := redisstore.Open(c.RedisURL, c.RedisPrefix)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("redis store: %w", err)
		}
		book := redisbook.New(st.Client(), c.RedisPrefix)
		return st, book, redisbook.RunLock[store.Op]{Locker: st, Book: book}, nil
	}
	sync, err := store.ParseSync(c.Sync)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := store.OpenBoltWith(c.DataDir, store.BoltOptions{Sync: sync, SyncEvery: c.SyncInterval, CheckpointMemory: c.CheckpointMemory, Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	// Ended runs' snapshots, lineage keys and stored tool outputs are read
	// again and again (the control plane, the read tool); this process is
	// the store's one writer, which the cache needs to see every write.
	cached := store.Cached(st, store.CacheOptions{MaxBytes: c.ReadCacheBytes, Buckets: store.ReadCacheBuckets})
	return cached, accounting.NewMemBook(), nil, nil
}

// memoBytes is policy.Options.MemoBytes for the configuration's
// policy_memo_bytes, where 0 turns memoisation off.
func memoBytes(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// recovered reports whether the embedded store replayed a log its last
// process left (it crashed); Redis has no such log.
func recovered(st store.Store) bool {
	b, ok := st.(interface{ Recovered() bool })
	return ok && b.Recovered()
}

// sweepEvery is the period of the pipeline's sweeper: ended runs leave
// memory within it after their retention (pipeline.Options.EndedRetention),
// and overdue runs end within it after their deadline. Each sweep visits
// every run in memory twice (BenchmarkEndedScan100k), a cost that grows
// with the runs in memory; a longer period would keep more ended runs
// waiting to leave, which grows with the rate at which runs end.
const sweepEvery = time.Second

// adminHosts are the Host names the control plane answers to besides IP
// literals and localhost: the configured ones and the listen address's name
// when it was given as one (the bound address is an IP).
func adminHosts(c config.Admin) []string {
	hosts := slices.Clone(c.AllowedHosts)
	if h, _, err := net.SplitHostPort(c.Listen); err == nil && h != "" {
		if _, err := netip.ParseAddr(h); err != nil {
			hosts = append(hosts, h)
		}
	}
	return hosts
}
