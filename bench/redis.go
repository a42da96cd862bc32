package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The targets of -redis: the gateway on a Redis store the harness starts
// for each round, once as one process and twice as two processes on the
// same Redis (store.redis_url). Beside haltline, the same build on its
// embedded store, they show what sharing a run's state through Redis
// costs a call, and what a second replica does to throughput.
const (
	redisOne     = "haltline-redis"
	redisTwo     = "haltline-2x-redis"
	redisTwoAlt  = "haltline-2x-redis-alt"
	redisDefault = "/usr/bin/redis-server"
)

// spread is how a target served by several processes shares its
// requests out among them.
type spread int

const (
	// byRun sends every call of a run to one process, as a proxy pinning
	// runs by X-Run-Id does (examples/envoy): a run's lock and snapshot
	// are then always last written by the process that reads them.
	byRun spread = iota
	// byStep sends consecutive steps of a run to different processes,
	// the worst case: every step reads what the other one wrote.
	byStep
)

func (s spread) String() string {
	if s == byStep {
		return "consecutive steps of a run alternate between the processes"
	}
	return "each run's calls go to one process"
}

// redisVariants are the -redis targets; db is the Redis database each
// uses, so that no target's runs, ledgers or locks meet another's.
func redisVariants(args string) []variant {
	return []variant{
		{name: redisOne, args: args, redisDB: 1, replicas: 1},
		{name: redisTwo, args: args, redisDB: 2, replicas: 2, spread: byRun},
		{name: redisTwoAlt, args: args, redisDB: 3, replicas: 2, spread: byStep},
	}
}

// findRedis resolves -redis: "" when off, else the redis-server binary.
func findRedis(flag string) (string, error) {
	switch flag {
	case "", "off":
		return "", nil
	case "auto":
		if p, err := exec.LookPath("redis-server"); err == nil {
			return p, nil
		}
		if _, err := os.Stat(redisDefault); err == nil {
			return redisDefault, nil
		}
		return "", fmt.Errorf("-redis auto: no redis-server in PATH nor at %s (Debian: apt-get install redis-server)", redisDefault)
	}
	if _, err := os.Stat(flag); err != nil {
		return "", fmt.Errorf("-redis: %w", err)
	}
	return flag, nil
}

// redisVersion is what `redis-server --version` says, for the report.
func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return bin
	}
	return strings.TrimSpace(string(out)) + " (" + bin + ")"
}

// startRedis starts redis-server on a free loopback port, on the servers'
// CPU, with nothing persisted: the figures are those of a gateway whose
// Redis answers from memory, not of Redis's disk.
func startRedis(ctx context.Context, pl *placement, dir, bin string) (*proc, error) {
	data := filepath.Join(dir, "redis-data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	return startListening(ctx, pl, func(addr string) (*proc, *os.File, error) {
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--dir", data,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
		s := &proc{name: "redis-server", cmd: cmd, addr: addr, log: filepath.Join(dir, "redis-server.log"), done: make(chan struct{})}
		logf, err := os.Create(s.log)
		return s, logf, err
	}, func(s *proc) error { return waitRedis(ctx, s) })
}

// waitRedis waits until the redis-server s answers on its address, and
// checks that it is s that answers and not another one on the port.
func waitRedis(ctx context.Context, s *proc) error {
	ours := "process_id:" + strconv.Itoa(s.pid())
	return waitUntil(ctx, s, 15*time.Second, 20*time.Millisecond, func() (bool, error) {
		info, err := redisInfo(s.addr, "server")
		switch {
		case err != nil:
			return false, nil
		case !strings.Contains(info, ours):
			return false, fmt.Errorf("another redis-server answers on %s", s.addr)
		}
		return true, nil
	})
}

// redisInfo sends INFO section as an inline command and returns the reply.
func redisInfo(addr, section string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO " + section + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	// A bulk string: $LENGTH, then that many bytes.
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// redisURL is the URL of database db on the round's redis-server.
func redisURL(r *proc, db int) string { return fmt.Sprintf("redis://%s/%d", r.addr, db) }

// redisCmd is what a command cost redis-server over a phase, per request
// the target was sent.
type redisCmd struct {
	Calls float64 `json:"calls_per_req"`
	Us    float64 `json:"us_per_req"` // the server's own time in the command
}

// redisCounts are redis-server's cumulative calls and microseconds by
// command (INFO commandstats), nil when they cannot be read.
type redisCounts map[string][2]int64

func readRedisCounts(r *proc) redisCounts {
	info, err := redisInfo(r.addr, "commandstats")
	if err != nil {
		return nil
	}
	return parseCommandStats(info)
}

// parseCommandStats reads lines such as
// cmdstat_get:calls=4196,usec=3902,usec_per_call=0.93,….
func parseCommandStats(info string) redisCounts {
	out := redisCounts{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, ok2 := strings.CutPrefix(name, "cmdstat_")
		if !ok || !ok2 {
			continue
		}
		var v [2]int64
		for kv := range strings.SplitSeq(rest, ",") {
			k, n, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				v[0], _ = strconv.ParseInt(n, 10, 64)
			case "usec":
				v[1], _ = strconv.ParseInt(n, 10, 64)
			}
		}
		out[cmd] = v
	}
	return out
}

// add adds what happened between two readings to c.
func (c redisCounts) add(before, after redisCounts) {
	for cmd, a := range after {
		b := before[cmd]
		d := c[cmd]
		d[0] += a[0] - b[0]
		d[1] += a[1] - b[1]
		c[cmd] = d
	}
}

// perRequest is c divided by n requests.
func (c redisCounts) perRequest(n int) map[string]redisCmd {
	if len(c) == 0 || n == 0 {
		return nil
	}
	out := map[string]redisCmd{}
	for cmd, v := range c {
		if v[0] > 0 {
			out[cmd] = redisCmd{Calls: float64(v[0]) / float64(n), Us: float64(v[1]) / float64(n)}
		}
	}
	return out
}

// redisCmdNote lists the commands that took most of redis-server's time,
// per request, with the calls of all of them.
func redisCmdNote(cmds map[string]redisCmd, most int) string {
	names := slices.SortedFunc(maps.Keys(cmds), func(a, b string) int { return cmp.Compare(cmds[b].Us, cmds[a].Us) })
	var calls float64
	for _, c := range cmds {
		calls += c.Calls
	}
	var parts []string
	for _, n := range names[:min(most, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.2f calls %.1f µs", n, cmds[n].Calls, cmds[n].Us))
	}
	return fmt.Sprintf("%.1f commands a request; most time: %s", calls, strings.Join(parts, ", "))
}
