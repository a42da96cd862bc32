package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haltline/haltline/runstate"
)

// redisProc is a redis-server of the test's own, on a free loopback port.
type redisProc struct {
	cmd    *exec.Cmd
	port   string
	dir    string
	exited chan struct{} // closed once cmd has exited and been waited for
}

// startRedisAt starts redis-server on port, keeping its data in dir.
func startRedisAt(t *testing.T, port, dir string) *redisProc {
	t.Helper()
	p, err := tryRedisAt(t, port, dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tryRedisAt starts redis-server on port and waits until it answers; it
// fails when the server exits (the port was taken) or another process
// answers on the port.
func tryRedisAt(t *testing.T, port, dir string) (*redisProc, error) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("these tests need redis-server (Debian package redis-server; .ci/run installs it): %v", err)
	}
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := &redisProc{cmd: cmd, port: port, dir: dir, exited: exited}
	t.Cleanup(p.kill)
	ours := fmt.Sprintf("process_id:%d\r\n", cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("redis-server on port %s exited", port)
		default:
		}
		if out, err := exec.Command("redis-cli", "-p", port, "info", "server").Output(); err == nil {
			if !strings.Contains(string(out), ours) {
				p.kill()
				return nil, fmt.Errorf("another redis-server answers on port %s", port)
			}
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redis-server did not start on port %s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRedis starts redis-server on a free port: another port when a
// parallel test's process took the one picked before it was bound.
func startRedis(t *testing.T) *redisProc {
	t.Helper()
	var err error
	for range 5 {
		addr := freePort(t)
		var p *redisProc
		if p, err = tryRedisAt(t, addr[strings.LastIndexByte(addr, ':')+1:], t.TempDir()); err == nil {
			return p
		}
	}
	t.Fatal(err)
	return nil
}

func (r *redisProc) url() string { return "redis://127.0.0.1:" + r.port + "/0" }

func (r *redisProc) kill() {
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
}

// startReplica runs the real binary on a shared Redis with a config file.
func startReplica(t *testing.T, bin, upstream, config string) *process {
	t.Helper()
	return launch(t, bin, []string{"OPENAI_API_KEY=sk-upstream", "ANTHROPIC_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_BASE_URL="},
		"--config", config, "--openai-base-url", upstream, "--anthropic-base-url", upstream)
}

func waitReady(t *testing.T, p *process) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func replicaConfig(t *testing.T, redisURL, policy string) string {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy")
	if err := os.MkdirAll(pol, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "data.json"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("store: {redis_url: %q}\npolicy_dir: %q\nvirtual_keys:\n  sk-agent: {tenant: acme, team: red}\n", redisURL, pol)
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Two gateway processes on one Redis: 100 parallel calls of one run spread
// across both, with a cost budget that fits 10 worst cases, reach the
// upstream at most 10 times; both control planes show the same counters;
// a team window is shared the same way.
func TestTwoReplicasShareRunsAndBudgets(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	rd := startRedis(t)
	// A slow upstream keeps every admitted call in flight while the rest
	// arrive, so the budget is the only thing that stops them.
	m := &toolLoop{finalAfter: 0, in: 20, out: 5, latency: 3 * time.Second}
	up := newUpstream(t, m.serve)
	body := fixedRequest(1000)
	wc := worstCase(t, body, 1000)
	policy := fmt.Sprintf(`{"haltline":{"teams":{"red":{"daily":{"max_cost_usd":%s}}}}}`, usd(10*wc))
	cfg := replicaConfig(t, rd.url(), policy)
	a := startReplica(t, bin, up.URL, cfg)
	b := startReplica(t, bin, up.URL, cfg)

	fire := func(n int, runID func(i int) string, budget string) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := a.data
				if i%2 == 1 {
					base = b.data
				}
				h := map[string]string{"X-Run-Id": runID(i)}
				if budget != "" {
					h["X-Run-Budget"] = budget
				}
				post(t, "http://"+base+"/v1/chat/completions", body, h)
			}()
		}
		wg.Wait()
	}
	// One run, its own cost budget of 10 worst cases (the team cap is as large).
	fire(100, func(int) string { return "r-shared" }, "max_cost_usd="+usd(10*wc))
	n := len(up.requests())
	t.Logf("one run: upstream received %d of 100 calls", n)
	if n > 10 || n == 0 {
		t.Fatalf("upstream received %d calls, the budget fits 10", n)
	}
	var ra, rb runstate.Record
	getJSON(t, "http://"+a.admin+"/api/v1/runs/r-shared", &ra)
	getJSON(t, "http://"+b.admin+"/api/v1/runs/r-shared", &rb)
	if ra.AgentSteps != rb.AgentSteps || ra.ModelCalls != rb.ModelCalls || ra.InputTokens != rb.InputTokens ||
		ra.ActualCostPicoUSD != rb.ActualCostPicoUSD || ra.Status != rb.Status {
		t.Fatalf("control planes disagree:\n%+v\n%+v", ra, rb)
	}
	if ra.ModelCalls != int64(n) {
		t.Fatalf("record counts %d model calls, upstream saw %d", ra.ModelCalls, n)
	}

	// The team's daily window, shared by two more runs on both replicas. The
	// first run spent little (actual usage is small), so the window still
	// has room for about 10 concurrent worst cases.
	before := len(up.requests())
	fire(60, func(i int) string { return "r-team-" + strconv.Itoa(i%3) }, "")
	got := len(up.requests()) - before
	t.Logf("team window: upstream received %d of 60 calls", got)
	if got > 10 || got == 0 {
		t.Fatalf("upstream received %d calls, the team window fits 10", got)
	}
}

// Redis stopped in the middle: clear errors in the provider's format,
// readiness false, no crash; once it is back, service resumes by itself and
// a settlement that could not be written while it was down is not lost.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	rd := startRedis(t)
	m := &toolLoop{finalAfter: 0, in: 100000, out: 10, latency: 400 * time.Millisecond} // $0.015 a call
	up := newUpstream(t, m.serve)
	cfg := replicaConfig(t, rd.url(), `{"haltline":{}}`)
	g := startReplica(t, bin, up.URL, cfg)
	url := "http://" + g.data + "/v1/chat/completions"
	hdr := map[string]string{"X-Run-Id": "r-outage", "X-Run-Budget": "max_cost_usd=1"}
	if st, _, b := post(t, url, fixedRequest(10), hdr); st != 200 {
		t.Fatalf("before: %d %s", st, b)
	}
	// A call in flight when Redis dies: its settlement must survive.
	done := make(chan int, 1)
	go func() {
		st, _, _ := post(t, url, fixedRequest(10), map[string]string{"X-Run-Id": "r-outage-2", "X-Run-Budget": "max_cost_usd=1"})
		done <- st
	}()
	time.Sleep(150 * time.Millisecond)
	rd.kill()
	<-done
	st, h, b := post(t, url, fixedRequest(10), hdr)
	if st != 503 || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("while down: %d %v %s", st, h, b)
	}
	resp, err := http.Get("http://" + g.admin + "/readyz")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("readyz while Redis is down: %v %v", resp, err)
	}
	resp.Body.Close()
	if g.cmd.ProcessState != nil {
		t.Fatalf("gateway exited: %s", g.stderr)
	}
	// Back on the same port with its append-only file.
	startRedisAt(t, rd.port, rd.dir)
	waitReady(t, g)
	// The settlement deferred during the outage is replayed by the sweeper
	// (every 5 s); then one more call shows both spends in the ledger.
	time.Sleep(6 * time.Second)
	st, h, b = post(t, url, fixedRequest(10), map[string]string{"X-Run-Id": "r-outage-2", "X-Run-Budget": "max_cost_usd=1"})
	// Two calls of $0.015006 on a $1 budget: 0.969988 left.
	if st != 200 || !strings.Contains(h.Get("X-Run-Budget-Remaining"), "cost_usd=0.969988") {
		t.Fatalf("after recovery: %d remaining %q: %s\n%s", st, h.Get("X-Run-Budget-Remaining"), b, g.stderr)
	}
}
