package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/telemetry"
)

const usage = `Haltline: a gateway that sees each agent run, and ends runaway runs gracefully.

Usage:
  gateway serve [--config FILE] [--listen ADDR] [--admin-listen ADDR] [--openai-base-url URL]
                [--anthropic-base-url URL] [--policy-dir DIR] [--prices FILE] [--data-dir DIR] [--redis-url URL]
  gateway demo                   scripted agents against a built-in model, no key, no network
  gateway runs list|show|events|cancel|resume [--admin URL] [--json] …
  gateway runs export [--admin URL] [--since DUR] [--out FILE]   recorded runs as JSON Lines
  gateway replay --policy-dir DIR [--prices FILE] [--json] RECORDINGS…
                                 where recorded runs would end under DIR's policy (no network)
  gateway policy test [DIR]      run the Rego unit tests (embedded defaults, and DIR's)
  gateway version                the module version and VCS revision of this binary
  gateway store check|repair [--data-dir DIR]
                                 describe the embedded store's damage; keep what is whole (gateway store -h)

Every command and verb takes -h or --help for its own usage.
`

// Main runs the command line; cmd/gateway calls it with os.Args[1:] and
// exits with ExitCode of its error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return UsageError{errors.New("no command")}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr, getenv)
	case "demo":
		fs := newFlags("demo", "\n\nScripted agents against a built-in model, no key, no network.")
		if ops, help, err := parseFlags(fs, args[1:], stdout, stderr); help || err != nil {
			return err
		} else if len(ops) > 0 {
			return usageErrorf(fs, stderr, "demo: unexpected %q", ops[0])
		}
		return Demo(ctx, stdout)
	case "runs":
		return runsCommand(ctx, args[1:], stdout, stderr, getenv)
	case "replay":
		return replayCommand(ctx, args[1:], stdout, stderr)
	case "store":
		return storeCommand(args[1:], stdout, stderr)
	case "policy":
		return policyCommand(ctx, args[1:], stdout, stderr)
	case "version":
		fs := newFlags("version", "\n\nThe module version and the VCS revision the binary was built from.")
		if ops, help, err := parseFlags(fs, args[1:], stdout, stderr); help || err != nil {
			return err
		} else if len(ops) > 0 {
			return usageErrorf(fs, stderr, "version: unexpected %q", ops[0])
		}
		return version(stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return UsageError{fmt.Errorf("unknown command %q", args[0])}
}

// policyCommand is `gateway policy test [DIR]`.
func policyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("policy test", "[DIR]\n\nRun the Rego unit tests: the embedded defaults', and DIR's when given.")
	if len(args) > 0 && isHelp(args[0]) {
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	}
	if len(args) == 0 || args[0] != "test" {
		verb := ""
		if len(args) > 0 {
			verb = args[0]
		}
		return usageErrorf(fs, stderr, "unknown policy command %q", verb)
	}
	ops, help, err := parseFlags(fs, args[1:], stdout, stderr)
	if help || err != nil {
		return err
	}
	if len(ops) > 1 {
		return usageErrorf(fs, stderr, "policy test: one DIR at most")
	}
	dir := ""
	if len(ops) == 1 {
		dir = ops[0]
	}
	passed, failed, err := policy.RunTests(ctx, dir, stdout, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return fmt.Errorf("%d policy test(s) failed", failed)
	}
	return nil
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("serve", "[flags]\n\nRun the gateway: defaults < --config file < environment < flags.")
	flags := config.NewServeFlags(fs)
	if ops, help, err := parseFlags(fs, args, stdout, stderr); help || err != nil {
		return err
	} else if len(ops) > 0 {
		return usageErrorf(fs, stderr, "serve: unexpected %q", ops[0])
	}
	cfg, err := flags.Build(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	// The log is written off the call path, by the LogWriter's goroutine;
	// closed last, after the drain, so that the shutdown's lines are out.
	lw := telemetry.NewLogWriter(stderr, 4<<20, logLinger, func(n int64) []byte {
		var b bytes.Buffer
		newLogger(cfg.Log, &b).Warn("log lines dropped: the log's destination did not keep up", "count", n)
		return b.Bytes()
	})
	defer lw.Close()
	log := newLogger(cfg.Log, lw)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if limit, source := tuneGC(ctx, getenv, cfg.Limits.MemoryBytes); limit > 0 {
		log.Info("memory limit set: the collector works harder as the process nears it", "bytes", limit, "from", source)
	}
	if n := tuneProcs(getenv); n > 0 {
		log.Info("one CPU: the Go scheduler runs two processors on it (GOMAXPROCS overrides)", "gomaxprocs", n)
	}
	g, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("draining")
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return g.Close(drain)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// logLinger is how long the log's writer gathers lines before a write(2)
// (see telemetry.LogWriter): long enough for the lines of a few calls to
// share a write and leave sysmon asleep, short enough to be all that a
// process killed outright loses of its log.
const logLinger = 5 * time.Millisecond
