package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// readPagesCall is one chat call of the restart tests' agent, which is
// offered one tool (read_page), to the gateway at base.
func readPagesCall(base string, msgs []openai.ChatCompletionMessageParamUnion, opts ...option.RequestOption) (*openai.ChatCompletion, http.Header, error) {
	client := openai.NewClient(option.WithBaseURL("http://"+base+"/v1"), option.WithAPIKey("sk-x"), option.WithMaxRetries(0))
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})}
	var resp *http.Response
	c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools},
		append(opts, option.WithResponseInto(&resp))...)
	if err != nil {
		return nil, nil, err
	}
	return c, resp.Header, nil
}

// answerTools is msgs followed by the model's message and a result for
// each tool call it made.
func answerTools(msgs []openai.ChatCompletionMessageParamUnion, msg openai.ChatCompletionMessage) []openai.ChatCompletionMessageParamUnion {
	msgs = append(msgs, msg.ToParam())
	for _, tc := range msg.ToolCalls {
		msgs = append(msgs, openai.ToolMessage(fmt.Sprintf("page %s", tc.Function.Arguments), tc.ID))
	}
	return msgs
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

	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report.")}
	step := func(base string) (string, openai.ChatCompletionMessage) {
		c, hdr, err := readPagesCall(base, msgs, option.WithHeader("X-Run-Budget", "max_steps=6"))
		if err != nil {
			t.Fatal(err)
		}
		msgs = answerTools(msgs, c.Choices[0].Message)
		return hdr.Get("X-Run-Id"), c.Choices[0].Message
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

// The real binary dies by SIGKILL with two calls of a run in flight (the
// provider has not answered them) after three completed steps, and
// restarts on the same data dir: the calls' holds died with the process,
// so the restart gives them back at once (no lease is left to run out)
// and the run records it; the run's record says three steps, its next
// call is step 4, and the budget left is what four completed calls leave.
func TestRestartReleasesTheHoldsOfCallsInFlight(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	m := &toolLoop{finalAfter: 1000, in: 300, out: 20}
	var hang atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if hang.Load() && !bytes.Contains(body, []byte("Flush.")) {
			<-r.Context().Done() // the gateway died with the call
			return
		}
		m.serve(w, r, body)
	})
	dir := t.TempDir()
	p := startBinary(t, bin, up.URL, dir)

	const runID = "r-cut-short"
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report.")}
	call := func(base string, msgs []openai.ChatCompletionMessageParamUnion, run string) (*openai.ChatCompletion, http.Header, error) {
		return readPagesCall(base, msgs, option.WithHeader("X-Run-Id", run), option.WithHeader("X-Run-Budget", "max_steps=10,max_tokens=100000"))
	}
	step := func(base string) http.Header {
		t.Helper()
		c, hdr, err := call(base, msgs, runID)
		if err != nil {
			t.Fatal(err)
		}
		msgs = answerTools(msgs, c.Choices[0].Message)
		return hdr
	}
	for range 3 {
		step(p.data)
	}

	// Two calls go out and hang at the provider.
	hang.Store(true)
	var inflight sync.WaitGroup
	for range 2 {
		inflight.Go(func() { _, _, _ = call(p.data, msgs, runID) }) // cut off by the kill
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(up.requests()) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the calls did not reach the provider: %d requests", len(up.requests()))
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Their holds ride on the store's next commit: a call that completes
	// makes one.
	if _, _, err := call(p.data, []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Flush.")}, "r-flush"); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	inflight.Wait()
	hang.Store(false)

	p2 := startBinary(t, bin, up.URL, dir)
	var rec runstate.Record
	getJSON(t, "http://"+p2.admin+"/api/v1/runs/"+runID, &rec)
	if rec.AgentSteps != 3 {
		t.Fatalf("after restart: %+v", rec)
	}
	var timeline struct{ Events []runstate.Event }
	getJSON(t, "http://"+p2.admin+"/api/v1/runs/"+runID+"/events", &timeline)
	released := slices.IndexFunc(timeline.Events, func(e runstate.Event) bool {
		return e.Type == "released_after_restart" && strings.HasPrefix(e.Detail, "2 call(s) in flight") && strings.Contains(e.Detail, "released steps=2;")
	})
	if released < 0 {
		t.Fatalf("no release of the two calls' holds in the timeline: %+v", timeline.Events)
	}

	hdr := step(p2.data)
	left := map[string]string{}
	for _, kv := range strings.Split(hdr.Get("X-Run-Budget-Remaining"), ";") {
		k, v, _ := strings.Cut(kv, "=")
		left[k] = v
	}
	// Four calls of 300 input and 20 output tokens each.
	if hdr.Get("X-Run-Step") != "4" || left["steps"] != "6" || left["tokens"] != "98720" {
		t.Fatalf("next call after the restart: step %s, budget left %q; want step 4, steps=6, tokens=98720",
			hdr.Get("X-Run-Step"), hdr.Get("X-Run-Budget-Remaining"))
	}
	getJSON(t, "http://"+p2.admin+"/api/v1/runs/"+runID, &rec)
	if rec.AgentSteps != 4 {
		t.Fatalf("record after the next call: %d steps, its X-Run-Step said 4", rec.AgentSteps)
	}
}
