package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/haltline/haltline/store"
)

// placement decides which CPU the load generator and the servers run on.
// With two or more CPUs the load generator gets CPU 0 and every server
// (mock, floor, gateway) CPU 1, so the generator never competes with what
// it measures; the servers share their core as they would share a sidecar
// host.
type placement struct {
	enabled bool
	taskset string // path of taskset, when present
	loadCPU int
	srvCPU  int
	note    string
}

func newPlacement(want bool) placement {
	p := placement{loadCPU: 0, srvCPU: 1}
	n := runtime.NumCPU()
	switch {
	case !want:
		p.note = "pinning off (-pin=false)"
		return p
	case n < 2:
		p.note = fmt.Sprintf("pinning skipped: %d CPU available", n)
		return p
	}
	p.enabled = true
	if path, err := exec.LookPath("taskset"); err == nil {
		p.taskset = path
	}
	return p
}

// pinSelf moves every thread of this process to the load generator's CPU;
// threads created later inherit it. One P is enough on one core and avoids
// two Ps fighting over it.
func (p *placement) pinSelf() error {
	if !p.enabled {
		return nil
	}
	var set unix.CPUSet
	set.Set(p.loadCPU)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("sched_setaffinity: %w", err)
		}
	}
	runtime.GOMAXPROCS(1)
	return nil
}

// start starts cmd on the servers' CPU: through taskset when present,
// otherwise by forking from a thread that holds that CPU for the moment
// (a child inherits the affinity of the thread that forks it).
func (p *placement) start(cmd *exec.Cmd) error {
	if !p.enabled {
		return cmd.Start()
	}
	if p.taskset != "" {
		cmd.Args = append([]string{p.taskset, "-c", strconv.Itoa(p.srvCPU)}, cmd.Args...)
		cmd.Path = p.taskset
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(p.srvCPU)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); err == nil {
		err = rerr
	}
	return err
}

func (p *placement) method() string {
	switch {
	case !p.enabled:
		return p.note
	case p.taskset != "":
		return "load generator: sched_setaffinity on all its threads; servers: taskset -c " + strconv.Itoa(p.srvCPU)
	default:
		return "load generator and servers: sched_setaffinity (taskset not found)"
	}
}

// proc is one server process the harness started.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string
	// admin is a gateway's control plane (its /debug/pprof), empty for
	// the others.
	admin string
	// data is a gateway's store directory, empty for the others.
	data string
	log  string // file holding its stderr
	done chan struct{}
	err  error
}

func (s *proc) pid() int { return s.cmd.Process.Pid }

// exited reports whether the process ended, and how.
func (s *proc) exited() (bool, error) {
	select {
	case <-s.done:
		return true, s.err
	default:
		return false, nil
	}
}

// stop ends the process: SIGTERM, then SIGKILL after a grace period.
func (s *proc) stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	if ok, _ := s.exited(); ok {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// tail returns the last lines of the process's stderr, for error reports.
func (s *proc) tail(n int) string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startRole starts this binary again in role (mock or floor) and waits for
// the address it announces.
func startRole(ctx context.Context, pl *placement, dir, role string, args ...string) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	s := &proc{name: role, cmd: cmd, log: filepath.Join(dir, role+".log"), done: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// A child outliving a crashed harness would hold its port and core.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pl.start(cmd); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addr <- a
			}
		}
	}()
	go func() { s.err = cmd.Wait(); close(s.done) }()
	select {
	case s.addr = <-addr:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("%s exited at start (%v): %s", role, s.err, s.tail(20))
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, fmt.Errorf("%s did not announce its address", role)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// launch starts s.cmd with its output in logf (closed here), dying with
// the harness, and watches for its end.
func (s *proc) launch(pl *placement, logf *os.File) error {
	s.cmd.Stdout = logf
	s.cmd.Stderr = logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := pl.start(s.cmd)
	logf.Close()
	if err != nil {
		return err
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	return nil
}

// freePort returns a loopback address that was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startGateway starts `gateway serve` against the mock and waits until its
// control plane reports ready.
func startGateway(ctx context.Context, pl *placement, dir, name, bin, mockURL string, extra, env []string) (*proc, error) {
	return startListening(ctx, pl, func(listen string) (*proc, *os.File, error) {
		admin, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		data := filepath.Join(dir, name+"-data")
		args := []string{"serve", "--listen", listen, "--admin-listen", admin,
			"--openai-base-url", mockURL, "--anthropic-base-url", mockURL, "--data-dir", data}
		args = append(args, extra...)
		cmd := exec.Command(bin, args...)
		// Provider keys in the harness's environment must not turn the
		// gateway into the virtual-key mode: the agent's key passes through.
		cmd.Env = append(filterEnv(os.Environ(), "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"), env...)
		s := &proc{name: name, cmd: cmd, addr: listen, admin: admin, data: data, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
		logf, err := os.Create(s.log)
		return s, logf, err
	}, func(s *proc) error { return waitReady(ctx, s, "http://"+s.admin+"/readyz") })
}

// startListening starts a server on a free loopback port: start makes
// its process, not yet launched, for that address, with the file for its
// output; ready waits until it serves. The port is picked free then bound
// by the server, and another process may take it in between, so a failed
// start is tried again.
func startListening(ctx context.Context, pl *placement, start func(addr string) (*proc, *os.File, error), ready func(*proc) error) (*proc, error) {
	var s *proc
	var lastErr error
	for range 3 {
		addr, err := freePort()
		if err != nil {
			return nil, err
		}
		p, logf, err := start(addr)
		if err != nil {
			return nil, err
		}
		if err := p.launch(pl, logf); err != nil {
			return nil, err
		}
		s = p
		if lastErr = ready(p); lastErr == nil {
			return p, nil
		}
		p.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("%s: %w\n%s", s.name, lastErr, s.tail(30))
}

// waitUntil waits, polling ready every tick, until it reports the process
// s ready, or s exits, or bound passes.
func waitUntil(ctx context.Context, s *proc, bound, tick time.Duration, ready func() (bool, error)) error {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if done, err := s.exited(); done {
			return fmt.Errorf("exited at start: %v", err)
		}
		if ok, err := ready(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tick):
		}
	}
	return fmt.Errorf("not ready after %v", bound)
}

func waitReady(ctx context.Context, s *proc, url string) error {
	c := &http.Client{Timeout: time.Second}
	return waitUntil(ctx, s, 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		resp, err := c.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func filterEnv(env []string, drop ...string) []string {
	out := env[:0:0]
next:
	for _, kv := range env {
		for _, d := range drop {
			if strings.HasPrefix(kv, d+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// buildGateway compiles ./cmd/gateway as it is, or in parts (the targets
// of -decompose: decompose.go). It builds inside the gateway's own module,
// the one this module's replace directive points at, so that the binary
// measured has the dependency versions the gateway's go.mod selects, not
// those the harness's module (with vegeta) would.
func buildGateway(ctx context.Context, dir string, parts bool) (string, error) {
	root, err := gatewayModuleDir(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gateway")
	args := []string{"build"}
	if parts {
		overlay, err := partsOverlay(root, dir)
		if err != nil {
			return "", err
		}
		bin += "-parts"
		args = append(args, "-overlay", overlay)
	}
	args = append(args, "-o", bin, "./cmd/gateway")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, out)
	}
	return bin, nil
}

// gatewayModule is the module whose gateway the harness measures.
const gatewayModule = "github.com/haltline/haltline"

// gatewayModuleDir is the directory of gatewayModule's sources, as the
// harness's go.mod resolves it (the repository's root, through its replace
// directive), whatever directory the harness runs from.
func gatewayModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", gatewayModule).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("go list -m %s: %w", gatewayModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: no directory (run the harness from its module, bench/)", gatewayModule)
	}
	return dir, nil
}

// The targets of -decompose: the gateway in parts (decompose.go), which
// HALTLINE_DECOMPOSE switches to relaying model calls without the pipeline
// (relay) or to dropping its store writes (nostore). With the
// gateway whole they split a call's cost three ways: the HTTP relay, the
// governance (run tracking, policy, metering, loop guard, the records'
// encoding) and the store (the log's write, the overlay, the checkpoint).
const (
	decomposeRelay   = "relay"
	decomposeNoStore = "nostore"
)

func decomposed(bin, args string) []variant {
	return []variant{
		{name: decomposeRelay, bin: bin, args: args, env: []string{"HALTLINE_DECOMPOSE=relay"}},
		{name: decomposeNoStore, bin: bin, args: args, env: []string{"HALTLINE_DECOMPOSE=nostore"}},
	}
}

// clkTck is the unit of utime and stime in /proc/PID/stat: USER_HZ, which
// Linux fixes at 100 on every architecture Go supports here.
const clkTck = 100

// cpuTime returns the user+system CPU time a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// statusField returns a field of /proc/PID/status, e.g. VmHWM.
func statusField(pid int, field string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	return statusValue(b, field)
}

// statusValue returns a field of a status file's text.
func statusValue(status []byte, field string) string {
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// contextSwitches returns the context switches, voluntary and not, of all
// of a process's threads so far. The process's own status counts only its
// first thread; a thread that ended takes its count with it (the Go
// runtime seldom ends one).
func contextSwitches(pid int) (int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "status"))
		if err != nil {
			continue // the thread ended since the listing
		}
		for _, f := range [...]string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
			n, err := strconv.ParseInt(statusValue(b, f), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s of thread %s: %w", f, t.Name(), err)
			}
			sum += n
		}
	}
	return sum, nil
}

// peakRSS returns VmHWM in KiB.
func peakRSS(pid int) int64 {
	v := strings.TrimSuffix(statusField(pid, "VmHWM"), " kB")
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n
}

// cpuModel names the machine's CPU from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// storedRuns counts the runs in the embedded store a gateway left in dir,
// or nil when it left none (a gateway on Redis) or it cannot be read.
func storedRuns(dir string) *int {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	st, err := store.OpenBolt(dir)
	if err != nil {
		return nil
	}
	defer st.Close()
	n := 0
	if err := st.Scan(store.Runs, func(_, _ []byte) error { n++; return nil }); err != nil {
		return nil
	}
	return &n
}
