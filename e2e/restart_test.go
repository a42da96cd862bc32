package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/runstate"
)

// buildGateway builds the real binary once per test binary.
func buildGateway(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/gateway")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build: %v", err)
	}
	return bin
}

// freePort returns a loopback address free when asked (for redis-server,
// which cannot report a port the kernel picked); another process may take
// it before it is bound, so its users check they reached their own.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type process struct {
	cmd         *exec.Cmd
	data, admin string
	stderr      *syncBuffer // read while the process writes it
}

func startBinary(t *testing.T, bin, upstream, dataDir string) *process {
	t.Helper()
	return launch(t, bin, noProviderEnv, "--openai-base-url", upstream, "--anthropic-base-url", upstream, "--data-dir", dataDir)
}

// noProviderEnv keeps the test machine's provider settings from the binary.
var noProviderEnv = []string{"OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_BASE_URL="}

// launch runs gateway serve with args, its listeners on ports the kernel
// picks (read back from its start line: a port picked free and bound later
// could be taken meanwhile by a parallel test's process), and waits until
// it is ready.
func launch(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	return launchWith(t, bin, env, false, args...)
}

// launchWith is launch; with holdStderr, nothing reads the process's
// stderr after its start line (until the test ends), as a log collector
// that has stopped.
func launchWith(t *testing.T, bin string, env []string, holdStderr bool, args ...string) *process {
	t.Helper()
	p := &process{stderr: &syncBuffer{}}
	p.cmd = exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	held := make(chan struct{})
	t.Cleanup(func() { close(held); _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	type started struct{ Msg, Listen, Admin string }
	addrs := make(chan started, 1)
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			fmt.Fprintf(p.stderr, "%s\n", sc.Bytes())
			var line started
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "gateway started" {
				addrs <- line
				if holdStderr {
					<-held
				}
			}
		}
		close(addrs)
		_, _ = io.Copy(p.stderr, r) // past a line too long to scan: the process must never block on its stderr
	}()
	select {
	case line, ok := <-addrs:
		if !ok {
			t.Fatalf("gateway exited before it started: %s", p.stderr)
		}
		p.data, p.admin = line.Listen, line.Admin
	case <-time.After(15 * time.Second):
		t.Fatalf("gateway did not start: %s", p.stderr)
	}
	waitReady(t, p)
	return p
}

// The real binary takes a run three steps, dies by SIGKILL, restarts on the
// same data dir: the run's counters go on from 3, its budget is not reset,
// and a call without run headers still continues it by lineage.
func TestRestartKeepsRuns(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	m := &toolLoop{finalAfter: 1000, in: 300, out: 20}
	up := newUpstream(t, m.serve)
	dir := t.TempDir()
	p := startBinary(t, bin, up.URL, dir)

	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report.")}
	step := func(base string) (string, openai.ChatCompletionMessage) {
		client := openai.NewClient(option.WithBaseURL("http://"+base+"/v1"), option.WithAPIKey("sk-x"), option.WithMaxRetries(0))
		var resp *http.Response
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools},
			option.WithHeader("X-Run-Budget", "max_steps=6"), option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		msg := c.Choices[0].Message
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			msgs = append(msgs, openai.ToolMessage(fmt.Sprintf("page %s", tc.Function.Arguments), tc.ID))
		}
		return resp.Header.Get("X-Run-Id"), msg
	}
	var runID string
	for range 3 {
		runID, _ = step(p.data)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()

	p2 := startBinary(t, bin, up.URL, dir)
	var rec runstate.Record
	getJSON(t, "http://"+p2.admin+"/api/v1/runs/"+runID, &rec)
	if rec.AgentSteps != 3 || rec.ModelCalls != 3 || rec.InputTokens != 900 || rec.MaxSteps != 6 {
		t.Fatalf("after restart: %+v", rec)
	}
	id4, _ := step(p2.data) // no run headers: lineage
	if id4 != runID {
		t.Fatalf("lineage lost: %s then %s", runID, id4)
	}
	getJSON(t, "http://"+p2.admin+"/api/v1/runs/"+runID, &rec)
	if rec.AgentSteps != 4 || rec.InputTokens != 1200 {
		t.Fatalf("counters did not go on: %+v", rec)
	}
	// The budget was not reset: max_steps=6 ends the run at step 6 with a wrap-up.
	step(p2.data)
	_, last := step(p2.data)
	getJSON(t, "http://"+p2.admin+"/api/v1/runs/"+runID, &rec)
	if rec.AgentSteps != 6 || rec.Status != runstate.CompletedWithDegradation || len(last.ToolCalls) != 0 {
		t.Fatalf("budget reset by the restart? %+v", rec)
	}

	// Once more, now that the run has ended: a restart leaves ended runs in
	// the store, yet the run is still found by id, and by lineage when the
	// conversation goes on (a new task in the same session).
	if err := p2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p2.cmd.Wait()
	p3 := startBinary(t, bin, up.URL, dir)
	getJSON(t, "http://"+p3.admin+"/api/v1/runs/"+runID, &rec)
	if rec.AgentSteps != 6 || rec.Status != runstate.CompletedWithDegradation {
		t.Fatalf("ended run after the second restart: %+v", rec)
	}
	calls := m.count()
	msgs = append(msgs, openai.UserMessage("Anything else?"))
	id7, _ := step(p3.data) // a new task in the conversation: a new run, found through the old one's lineage
	getJSON(t, "http://"+p3.admin+"/api/v1/runs/"+id7, &rec)
	if id7 == runID || rec.SessionID != "s-"+runID || m.count() != calls+1 {
		t.Fatalf("new task after the restart: run %s (was %s), session %q, upstream calls %d → %d", id7, runID, rec.SessionID, calls, m.count())
	}
}

// A log collector that stops reading must not stop the gateway: its stderr
// is a pipe nobody reads after the start line (64 KB of pipe buffer, about
// 150 call lines), and 600 calls still get their answers. Written in each
// call's goroutine, a line blocked that call, and every later one behind
// the log's lock.
func TestCallsGoOnWhenTheLogIsNotRead(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	up := newUpstream(t, (&toolLoop{finalAfter: 0, in: 30, out: 5}).serve)
	p := launchWith(t, bin, noProviderEnv, true, "--openai-base-url", up.URL, "--anthropic-base-url", up.URL, "--data-dir", t.TempDir())
	client := openai.NewClient(option.WithBaseURL("http://"+p.data+"/v1"), option.WithAPIKey("sk-x"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 600 {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("Question %d.", i))},
		}, option.WithHeader("X-Run-Id", fmt.Sprintf("r-log-%d", i)))
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}
