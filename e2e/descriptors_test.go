package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
)

// The test binary runs itself as the gateway's process when this variable
// names the upstream: the open-file limit is the process's own.
const fdChildEnv = "HALTLINE_E2E_FD_CHILD_UPSTREAM"

// fdHeadroom is how many descriptors the child gateway may open beyond
// those it holds once started.
const fdHeadroom = 16

// A gateway out of descriptors cannot accept connections: its data plane
// keeps retrying instead of stopping, /readyz answers 503 with the reason
// while it lasts, and once descriptors are free again the data plane
// accepts and serves model calls. The gateway runs in a child process
// whose open-file limit leaves a few descriptors free; the test holds idle
// connections until accepting fails.
func TestDataPlaneOutlivesDescriptorExhaustion(t *testing.T) {
	if base := os.Getenv(fdChildEnv); base != "" {
		fdChild(t, base)
		return
	}
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 200, fixture(t, "openai-chat/response-usage-cache-hit.json"))
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataPlaneOutlivesDescriptorExhaustion$")
	cmd.Env = append(os.Environ(), fdChildEnv+"="+up.URL, "TMPDIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			stdin.Close()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("gateway's log:\n%s", stderr.String())
		}
	}()
	var dataAddr, adminAddr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "gateway %s %s", &dataAddr, &adminAddr); err == nil {
			break
		}
	}
	if adminAddr == "" {
		t.Fatal("the child gateway did not start")
	}
	go io.Copy(io.Discard, stdout)

	// The control plane's connection is open before the descriptors run
	// out, and kept alive.
	admin := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	readyz := func() (int, string) {
		resp, err := admin.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != 200 {
		t.Fatalf("readyz before: %d %s", code, body)
	}
	var held []net.Conn
	for range 3 * fdHeadroom {
		c, err := net.DialTimeout("tcp", dataAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	var body string
	waitFor(t, "readyz 503 while accepting fails", func() bool {
		var code int
		code, body = readyz()
		return code == 503
	})
	if !strings.Contains(body, "cannot accept") || !strings.Contains(body, "too many open files") {
		t.Fatalf("readyz gives no reason: %s", body)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "readyz 200 once descriptors are free", func() bool { code, _ := readyz(); return code == 200 })

	req, err := http.NewRequest(http.MethodPost, "http://"+dataAddr+"/v1/chat/completions", bytes.NewReader(spChatBody(false, "")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-agent-test")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("model call after the exhaustion: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"usage"`) {
		t.Fatalf("model call after the exhaustion: %d %s", resp.StatusCode, b)
	}

	stdin.Close()
	exited = true
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child gateway: %v", err)
	}
	if strings.Contains(stderr.String(), "listener stopped") {
		t.Fatal("a listener stopped")
	}
}

// fdChild is the child process: a gateway whose open-file limit leaves
// fdHeadroom descriptors free, serving until its stdin closes.
func fdChild(t *testing.T, base string) {
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL, cfg.Providers.Anthropic.BaseURL = base, base
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	// No bound below the open-file limit: accepting itself must fail.
	cfg.Limits.MaxConnections = 0
	// The parent's idle connections keep their descriptors.
	cfg.Limits.HeaderTimeout = time.Minute
	g, err := app.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(fds) + fdHeadroom)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("gateway %s %s\n", g.DataAddr, g.AdminAddr)
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
