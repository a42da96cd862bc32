// Command bench is Haltline's load harness: it measures what the
// gateway adds to a model call, black-box, against references measured in
// the same run and on the same machine:
//
//   - direct: the load generator talks to the mock upstream itself;
//   - floor: a bare httputil.ReverseProxy in front of the same mock, the
//     least any Go proxy can add;
//   - nginx, when a binary is found (-nginx): the reference for streams'
//     time to first byte, one process with upstream keep-alive and unbuffered
//     responses; a reference like the floor, never checked itself;
//   - haltline: the real gateway binary, every default feature on (run
//     tracking, metering, policy, loop guard), plus any -variant;
//   - with -redis, the same gateway on a redis-server the harness starts:
//     one process, and two processes sharing it, each run's calls to one
//     of them or a run's steps alternating between them (redis.go).
//
// Everything it starts listens on 127.0.0.1 and stops with it; every phase
// is bounded in time. All targets are up for a whole round and take turns
// within each phase (-turns), so that what a shared machine does in one
// minute weighs on every target's figures, not on one's.
//
// It is a module of its own (bench/go.mod), so that its load generator is no
// dependency of the gateway's; run it from bench/:
//
//	go run . -short                    # CI: a few seconds, no speed assertions
//	go run . -json out/results.json    # full: 3 rounds, a few minutes
//	go run . -soak 30m                 # the gateway at 1,000 req/s: memory, goroutines, store size over time
//
// The mock upstream and the floor proxy are this same binary started again
// in another role (HALTLINE_BENCH_ROLE), so that each is a process of its
// own: pinned to a core, with its own CPU time and peak RSS in /proc.
//
// Workload. Every model request carries an X-Run-Id, and the requests of one
// run form a real agent loop: step k echoes the k tool calls the mock asked
// for and their (distinct) results, so the gateway tracks the run, meters
// each step, asks policy, feeds the loop guard and, when the mock gives its
// final answer at the last step, completes the run. Run ids cycle over
// -slots concurrent runs of -steps steps each, so consecutive steps of one
// run are -slots requests apart (about a second at 1,000 req/s) and never
// overlap. Explicit run ids were chosen over lineage-only continuation
// because they keep the identification cost constant and the workload the
// same for the three targets; lineage indexing still runs, since the gateway
// indexes every answer. -lineage sends none: the path of an agent left
// unchanged, where the gateway finds each step's run by the tool calls it
// echoes and names new runs itself; the report then counts the runs the
// gateway's answers named, so a step it failed to attach shows as a run.
// The runs in progress when a workload stops (at most -slots: one per
// phase and target, and one per saturation search, whose levels share a
// workload) stay unfinished, as an agent's that went away: the gateway
// keeps them in memory until their deadline.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// roleEnv selects the role of a re-executed harness binary.
const roleEnv = "HALTLINE_BENCH_ROLE"

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runRole(role, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench", role+":", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(harnessMain(os.Args[1:]))
}

// options are the harness's flags.
type options struct {
	short    bool
	rounds   int
	duration time.Duration
	turns    int
	warmup   time.Duration
	satStep  time.Duration
	satMax   int
	satMin   int
	satHold  time.Duration
	streams  int
	chunks   int
	chunkGap time.Duration
	// firstGap is the mock's pause after a stream's first event. Without
	// it the mock, which shares its core with the proxy, writes a whole
	// 50-chunk stream (about 0.45 ms) before the kernel runs the proxy
	// woken by its first bytes: the proxies' added time to first byte was
	// the mock's writing time (the floor's 451–483 µs against the mock's
	// 449–475 µs total), not theirs.
	firstGap    time.Duration
	steps       int
	slots       int
	lineage     bool
	gatewayBin  string
	nginx       string
	redis       string // -redis: redis-server for the Redis targets, "" off
	gatewayArgs string
	variants    variantFlag
	decompose   bool
	anthropic   bool
	pin         bool
	jsonOut     string
	pprofDir    string // -pprof: where the gateways' CPU profiles go
	timeout     time.Duration
	command     string
	only        *regexp.Regexp
	// -soak: the gateway alone at soakRate for soak, sampled every
	// soakSample after soakWarm (soak.go).
	soak       time.Duration
	soakRate   int
	soakSample time.Duration
	soakWarm   time.Duration
}

// variantFlag collects -variant name[@binary]=args: more Haltline targets
// measured in the same run, e.g. the Redis store, or another build of the
// gateway. A build measured this way takes its turns beside the first in
// every fixed-rate phase and stream of every round, so the two meet the
// same minutes of a shared machine, where runs one after the other meet
// different ones; the saturation searches follow one another, and the
// gateways' order among them rotates from round to round (see satOrder).
type variantFlag []variant

// variant is a Haltline target: its name in the report, the gateway
// binary (empty: the run's own), the extra arguments of gateway serve and
// the extra environment it starts with (NAME=value).
type variant struct {
	name, bin, args string
	env             []string
	// redisDB > 0: on the round's redis-server (-redis), this database.
	redisDB int
	// replicas is how many gateway processes serve the target (0: one),
	// the load shared out among them as spread says.
	replicas int
	spread   spread
}

func (v *variantFlag) String() string {
	var s []string
	for _, x := range *v {
		name := x.name
		if x.bin != "" {
			name += "@" + x.bin
		}
		s = append(s, name+"="+x.args)
	}
	return strings.Join(s, " ")
}

func (v *variantFlag) Set(s string) error {
	name, args, ok := strings.Cut(s, "=")
	name, bin, _ := strings.Cut(name, "@")
	if !ok || name == "" {
		return fmt.Errorf("want name=args or name@binary=args, got %q", s)
	}
	*v = append(*v, variant{name: name, bin: bin, args: args})
	return nil
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&o.short, "short", false, "CI mode: one short round, a few seconds, no speed assertions")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; figures are medians over rounds")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of each fixed-rate phase")
	fs.IntVar(&o.turns, "turns", 2, "turns each target takes in a phase: the targets alternate, each phase's -duration and -streams shared out over the turns (a turn much shorter than the gateway's checkpoint period, 8 s, measures a burstier load than a sustained one)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up at 500 req/s before each target's phases")
	fs.DurationVar(&o.satStep, "sat-step", 2*time.Second, "length of each concurrency level of the saturation search")
	fs.IntVar(&o.satMax, "sat-max", 256, "highest concurrency of the saturation search")
	fs.IntVar(&o.satMin, "sat-min", 16, "concurrency the saturation search reaches before it may stop (at most -sat-max): a level or two slowed by a checkpoint or the machine ended searches at 2 or 4 workers")
	fs.DurationVar(&o.satHold, "sat-hold", 16*time.Second, "after the saturation search, its best concurrency held this long, the saturation figures read over it: two of the gateway's checkpoint periods (8 s), whose CPU a 2 s level of the search bears or not (0: the search's best level)")
	fs.IntVar(&o.streams, "streams", 300, "streamed calls measured one at a time, per API")
	fs.IntVar(&o.chunks, "chunks", 50, "content chunks in each streamed answer")
	fs.DurationVar(&o.chunkGap, "chunk-gap", 0, "pause of the mock between stream chunks")
	fs.DurationVar(&o.firstGap, "first-event-gap", time.Millisecond, "pause of the mock after a stream's first event, as a provider's first token comes a model step before the next (0: none)")
	fs.IntVar(&o.steps, "steps", 4, "model calls per run (the last one gets the final answer)")
	fs.IntVar(&o.slots, "slots", 1024, "runs in progress at once; consecutive steps of a run are this many requests apart")
	fs.BoolVar(&o.lineage, "lineage", false, "send no X-Run-Id: the gateway finds each step's run by lineage (the tool calls it echoes) and names new runs itself, as for an agent left unchanged")
	fs.StringVar(&o.gatewayBin, "gateway-bin", "", "gateway binary (default: go build ./cmd/gateway into a temporary directory)")
	fs.StringVar(&o.nginx, "nginx", "auto", "nginx binary measured as a reference proxy in the same rounds (\"auto\": nginx in PATH, else "+nginxFallback+", skipped when neither exists; \"\" or \"off\": not measured)")
	fs.StringVar(&o.redis, "redis", "off", "redis-server for the targets on a Redis store started for each round: "+redisOne+" (one gateway), "+redisTwo+" (two gateways on the same Redis, each run's calls to one of them) and "+redisTwoAlt+" (the two, consecutive steps of a run alternating between them) (\"auto\": redis-server in PATH, else "+redisDefault+"; \"off\": none)")
	fs.StringVar(&o.gatewayArgs, "gateway-args", "", "extra arguments for `gateway serve` of the haltline target, space separated (e.g. \"--redis-url redis://127.0.0.1:6379\")")
	fs.BoolVar(&o.decompose, "decompose", false, "also measure the gateway in parts, two targets built from its sources with the harness's additions (go build -overlay): \"relay\" (the fasthttp server and client alone, no pipeline) and \"nostore\" (every call governed, its store writes dropped), beside the gateway whole")
	fs.Var(&o.variants, "variant", "extra Haltline target name[@BINARY]=ARGS measured in the same run (repeatable), e.g. 'redis=--redis-url redis://127.0.0.1:6379', or another build: 'new@/tmp/gateway-new='")
	fs.BoolVar(&o.anthropic, "anthropic", true, "also measure /v1/messages (Anthropic format)")
	fs.BoolVar(&o.pin, "pin", true, "pin the load generator to CPU 0, the mock and the proxies to CPU 1")
	fs.StringVar(&o.pprofDir, "pprof", "", "write the Haltline targets' CPU profiles to this directory, read from their /debug/pprof/profile while they are measured: one a turn of each fixed-rate phase, and one after the other, of -sat-step (at least 1 s) over a saturation search and of 1 s over a turn of streams, named TARGET-PHASE-rROUND-NNN.pprof (go tool pprof -top DIR/haltline-saturation-*.pprof), each with the heap profile taken as it ends beside it, NNN.heap (go tool pprof -sample_index=inuse_space -top FILE); the sampling costs the gateway about 1 % of its CPU")
	fs.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file (\"-\" for standard output)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "hard bound on the whole run")
	fs.DurationVar(&o.soak, "soak", 0, "run the soak instead of the phases: the gateway alone at -soak-rate for this long, its RSS, goroutines and store size sampled; fails when one trends upward (the last third's mean past the first third's, after the warm-up)")
	fs.IntVar(&o.soakRate, "soak-rate", 1000, "the soak's rate (req/s, 2 KB chat requests)")
	fs.DurationVar(&o.soakSample, "soak-every", 0, "the soak's sampling period (default: a minute, or a tenth of a soak shorter than 10 minutes)")
	fs.DurationVar(&o.soakWarm, "soak-warmup", 0, "the soak's samples before this are left out of the trends (default: a tenth of the soak, at least one period)")
	only := fs.String("only", "", "run only the phases whose names match this regular expression ("+strings.Join(phaseNames, ", ")+"), to profile or compare one; the report's other rows stay empty")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return o, fmt.Errorf("-only: %w", err)
		}
		o.only = re
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.short {
		// Short mode proves that everything runs and every request
		// succeeds; its figures mean nothing.
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("rounds", func() { o.rounds = 1 })
		def("duration", func() { o.duration = 400 * time.Millisecond })
		def("warmup", func() { o.warmup = 200 * time.Millisecond })
		def("sat-step", func() { o.satStep = 300 * time.Millisecond })
		def("sat-max", func() { o.satMax = 8 })
		def("sat-hold", func() { o.satHold = 500 * time.Millisecond })
		def("streams", func() { o.streams = 10 })
		def("slots", func() { o.slots = 128 })
		def("timeout", func() { o.timeout = 2 * time.Minute })
	}
	if o.soak < 0 || o.soakRate < 1 || o.soakSample < 0 || o.soakWarm < 0 {
		return o, fmt.Errorf("soak, soak-every and soak-warmup must not be negative, soak-rate must be positive")
	}
	if o.soak > 0 && !set["timeout"] {
		o.timeout = o.soak + 5*time.Minute
	}
	if o.rounds < 1 || o.steps < 1 || o.slots < 1 || o.chunks < 1 || o.satMax < 1 || o.turns < 1 {
		return o, fmt.Errorf("rounds, turns, steps, slots, chunks and sat-max must be positive")
	}
	for _, v := range o.variants {
		// Targets are keyed by name in the results.
		if slices.Contains([]string{"direct", "floor", "nginx", "haltline", decomposeRelay, decomposeNoStore, redisOne, redisTwo, redisTwoAlt}, v.name) {
			return o, fmt.Errorf("-variant %s: the name is taken by a built-in target", v.name)
		}
	}
	o.command = "cd bench && go run . " + strings.Join(args, " ")
	return o, nil
}

func harnessMain(args []string) int {
	o, err := parseOptions(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.soak > 0 {
		if err := runSoak(ctx, o, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	rep, err := run(ctx, o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if bad := rep.failures(); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, "bench: FAIL:", b)
		}
		return 1
	}
	return 0
}
