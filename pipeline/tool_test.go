package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

func toolPipeline(t testing.TB, now func() time.Time) *pipeline.Pipeline {
	return toolPipelineOn(t, now, nil)
}

// toolPipelineOn is toolPipeline persisting to st (nil: memory only).
func toolPipelineOn(t testing.TB, now func() time.Time, st store.Store) *pipeline.Pipeline {
	t.Helper()
	return toolReplica(t, now, st, nil)
}

// toolReplica is toolPipelineOn with lock serialising its runs with other
// replicas on st (nil: st is its own).
func toolReplica(t testing.TB, now func() time.Time, st store.Store, lock pipeline.RunLock) *pipeline.Pipeline {
	t.Helper()
	pol, err := policy.New(context.Background(), policy.Options{Data: map[string]any{"tools": map[string]any{
		"fs": map[string]any{"read": map[string]any{"level": "L0"}, "write": map[string]any{"level": "L1"},
			"delete": map[string]any{"level": "L2"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Now: now, Store: st, RunLock: lock})
	p.ToolRegistry().Declare("fs", "read", "L0", 0)
	p.ToolRegistry().Declare("fs", "write", "L1", 0)
	p.ToolRegistry().Declare("fs", "delete", "L2", 0)
	return p
}

// runTool runs one call through BeginTool/FinishTool with a fake tool that
// answers text.
func runTool(p *pipeline.Pipeline, run, name, args, text string) (*pipeline.ToolTurn, pipeline.StoredResult) {
	tt := p.BeginTool(context.Background(), &pipeline.ToolCall{Server: "fs", Name: name, Arguments: []byte(args), RunID: run})
	if tt.Answer != nil {
		return tt, pipeline.StoredResult{}
	}
	res := p.FinishTool(context.Background(), tt, pipeline.ToolOutcome{Text: text,
		Render: func(s string) pipeline.StoredResult {
			return pipeline.StoredResult{Status: 200, Body: []byte(`"` + s + `"`)}
		}})
	return tt, res
}

func TestToolGates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		desc  string
		calls []string // tool names, same arguments each time
		kinds []pipeline.ToolAnswerKind
	}{
		{desc: "L0 always executes", calls: []string{"read", "read"}, kinds: []pipeline.ToolAnswerKind{0, 0}},
		{desc: "L1 repeat is replayed", calls: []string{"write", "write"}, kinds: []pipeline.ToolAnswerKind{0, pipeline.ToolReplayed}},
		{desc: "L2 is held", calls: []string{"delete", "delete"}, kinds: []pipeline.ToolAnswerKind{pipeline.ToolPending, pipeline.ToolPending}},
		{desc: "unknown tool gets the default (L1)", calls: []string{"chmod", "chmod"}, kinds: []pipeline.ToolAnswerKind{0, pipeline.ToolReplayed}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			p := toolPipeline(t, time.Now)
			for i, name := range tc.calls {
				tt, _ := runTool(p, "r-gates", name, `{"path":"a"}`, "ok")
				var got pipeline.ToolAnswerKind
				if tt.Answer != nil {
					got = tt.Answer.Kind
				}
				if got != tc.kinds[i] {
					t.Fatalf("call %d: answer %v, want %v", i, got, tc.kinds[i])
				}
			}
		})
	}
}

// A ticket nobody decides expires; the next identical call gets a new one.
func TestToolApprovalExpires(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	p := toolPipeline(t, func() time.Time { return clock })
	p.ToolRegistry().SetApprovalTTL(time.Minute)
	tt, _ := runTool(p, "r-exp", "delete", `{"path":"a"}`, "")
	first := tt.Answer.Approval.Ticket
	clock = clock.Add(2 * time.Minute)
	if _, err := p.Decide(first, "approve", "x"); err != pipeline.ErrTicketExpired {
		t.Fatalf("decide expired: %v", err)
	}
	tt, _ = runTool(p, "r-exp", "delete", `{"path":"a"}`, "")
	if tt.Answer == nil || tt.Answer.Kind != pipeline.ToolPending || tt.Answer.Approval.Ticket == first {
		t.Fatalf("after expiry: %+v", tt.Answer)
	}
	if got := p.Approvals(pipeline.ApprovalFilter{Status: pipeline.ApprovalExpired}); len(got) != 1 || got[0].Ticket != first {
		t.Fatalf("expired list: %+v", got)
	}
}

func TestToolOutputCut(t *testing.T) {
	t.Parallel()
	cases := []struct {
		desc string
		text string
		cut  bool
	}{
		{desc: "short", text: "hello", cut: false},
		{desc: "exactly the limit", text: strings.Repeat("a", pipeline.ToolInlineChars), cut: false},
		{desc: "multi-byte under the limit in characters", text: strings.Repeat("é", pipeline.ToolInlineChars), cut: false},
		{desc: "long", text: "H" + strings.Repeat("é", 10000) + "T", cut: true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			p := toolPipeline(t, time.Now)
			tt, res := runTool(p, "r-cut", "read", `{}`, tc.text)
			if (res.Handle != "") != tc.cut {
				t.Fatalf("handle %q, cut %v", res.Handle, tc.cut)
			}
			if !tc.cut {
				return
			}
			body := string(res.Body)
			if !strings.HasPrefix(body, `"H`) || !strings.Contains(body, "T\n[haltline") || !strings.Contains(body, "handle "+res.Handle) {
				t.Fatalf("cut text: %.200q", body)
			}
			full, err := p.Blob(pipeline.BlobOfRun(tt.RunID()), res.Handle)
			if err != nil || full != tc.text {
				t.Fatalf("blob: %v", err)
			}
		})
	}
}

// A decision taken on a replica that did not see the run's last change
// (another replica cancelled it) is taken on the run as stored: the
// cancellation stands, not overwritten by the run as the deciding replica
// last held it.
func TestDecideCatchesUpWithAnotherReplica(t *testing.T) {
	t.Parallel()
	st := openBolt(t, t.TempDir())
	a := toolReplica(t, time.Now, st, soleLock{})
	b := toolReplica(t, time.Now, st, soleLock{})
	tt, _ := runTool(a, "r-two", "delete", `{"path":"a"}`, "")
	if tt.Answer == nil || tt.Answer.Kind != pipeline.ToolPending {
		t.Fatalf("delete was not held: %+v", tt.Answer)
	}
	if _, err := b.Cancel("r-two"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Decide(tt.Answer.Approval.Ticket, "approve", "ops"); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*pipeline.Pipeline{"deciding replica": a, "cancelling replica": b} {
		if rec, _, _ := p.Record("r-two"); rec.Status != runstate.Cancelled {
			t.Errorf("%s: run %s, want cancelled", name, rec.Status)
		}
	}
}

// A denied approval ends the run approval_denied.
func TestToolApprovalDeniedEndsRun(t *testing.T) {
	t.Parallel()
	p := toolPipeline(t, time.Now)
	tt, _ := runTool(p, "r-deny", "delete", `{"path":"a"}`, "")
	if _, err := p.Decide(tt.Answer.Approval.Ticket, "deny", "ops"); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := p.Record("r-deny")
	if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonApprovalDenied {
		t.Fatalf("%s/%s", rec.Status, rec.Reason)
	}
	tt, _ = runTool(p, "r-deny", "read", `{}`, "")
	if tt.Answer == nil || tt.Answer.Kind != pipeline.ToolRunEnded {
		t.Fatalf("call after deny: %+v", tt.Answer)
	}
}

// BenchmarkToolGatesL0 is the gate sequence of an L0 call without the
// network: attribution by X-Run-Id, registry, policy, idempotency check,
// forward bookkeeping, finish (cut check, loop guard, record).
func BenchmarkToolGatesL0(b *testing.B) {
	ctx := context.Background()
	call := &pipeline.ToolCall{Server: "fs", Name: "read", Arguments: []byte(`{"path":"reports/q3.txt","limit":100}`), RunID: "r-bench"}
	out := pipeline.ToolOutcome{Text: "quarterly numbers",
		Render: func(s string) pipeline.StoredResult { return pipeline.StoredResult{Status: 200} }}
	for _, bc := range []struct {
		desc string
		p    *pipeline.Pipeline
	}{
		{desc: "rego", p: toolPipeline(b, time.Now)},
		// Without a policy engine: the gateway's own share of the gates.
		{desc: "no-policy", p: pipeline.New(pipeline.Options{})},
	} {
		bc.p.ToolRegistry().Declare("fs", "read", "L0", 0)
		b.Run(bc.desc, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tt := bc.p.BeginTool(ctx, call)
				if tt.Answer != nil {
					b.Fatalf("refused: %s", tt.Answer.Message)
				}
				bc.p.FinishTool(ctx, tt, out)
			}
		})
	}
}

// A run that used tools leaves memory once it has ended, like any other:
// its cut results are read from the store, and, resumed, it answers a
// repeated write from the result it stored instead of executing it again.
func TestEndedRunWithToolStateLeavesMemory(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	p := toolPipelineOn(t, func() time.Time { return clock }, openBolt(t, t.TempDir()))
	ctx := context.Background()
	model := func() *pipeline.Turn {
		turn := p.Begin(ctx, &pipeline.Call{Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do it."}]}`),
			RunID: "r-tools", RunBudget: "max_steps=2"}, openai.Chat{})
		if turn.Answer == nil {
			p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(toolResponse)})
		}
		return turn
	}
	model()
	long := strings.Repeat("line of a long file\n", 400)
	_, read := runTool(p, "r-tools", "read", `{"path":"big"}`, long)
	if tt, _ := runTool(p, "r-tools", "write", `{"path":"a"}`, "written"); tt.Answer != nil {
		t.Fatalf("write: %+v", tt.Answer)
	}
	model() // the last of max_steps=2: a wrap-up, and the run ends
	rec, _, _ := p.Record("r-tools")
	if !rec.Status.Final() || !rec.Recoverable || read.Handle == "" {
		t.Fatalf("setup: %+v, handle %q", rec, read.Handle)
	}
	clock = clock.Add(time.Minute)
	if n := p.SweepEnded(); n != 1 || p.Runs().Get("r-tools") != nil {
		t.Fatalf("evicted %d; still in memory %v", n, p.Runs().Get("r-tools") != nil)
	}
	for _, run := range []string{"r-tools", ""} {
		if text, err := p.Blob(pipeline.BlobOfRun(run), read.Handle); err != nil || text != long {
			t.Fatalf("blob (run %q) after eviction: %d bytes, %v", run, len(text), err)
		}
	}
	if _, err := p.Blob(pipeline.BlobOfRun("r-other"), read.Handle); err != pipeline.ErrNoBlob {
		t.Fatalf("another run's blob: %v", err)
	}
	if _, err := p.Resume("r-tools", rec.ResumeToken, accounting.Budget{Vector: accounting.Vector{Steps: 1}}); err != nil {
		t.Fatal(err)
	}
	tt, _ := runTool(p, "r-tools", "write", `{"path":"a"}`, "written twice")
	if tt.Answer == nil || tt.Answer.Kind != pipeline.ToolReplayed {
		t.Fatalf("repeated write after the run came back: %+v (executed again?)", tt.Answer)
	}
}

// An ended run holding approval tickets leaves memory once none is pending
// (an approved one is never used by an ended run); its tickets are then
// read from the store.
func TestRunWithTicketsLeavesMemoryOnceTheyClose(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_800_000_000, 0)
	p := toolPipelineOn(t, func() time.Time { return clock }, openBolt(t, t.TempDir()))
	p.ToolRegistry().SetApprovalTTL(time.Hour)
	tt, _ := runTool(p, "r-tickets", "delete", `{"path":"a"}`, "")
	used := tt.Answer.Approval.Ticket
	tt, _ = runTool(p, "r-tickets", "delete", `{"path":"b"}`, "")
	left := tt.Answer.Approval.Ticket
	tt, _ = runTool(p, "r-tickets", "delete", `{"path":"c"}`, "")
	unused := tt.Answer.Approval.Ticket
	for _, ticket := range []string{used, unused} {
		if _, err := p.Decide(ticket, "approve", "ops"); err != nil {
			t.Fatal(err)
		}
	}
	if tt, _ := runTool(p, "r-tickets", "delete", `{"path":"a"}`, "deleted"); tt.Answer != nil {
		t.Fatalf("approved call: %+v", tt.Answer)
	}
	if _, err := p.Cancel("r-tickets"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Minute)
	if n := p.SweepEnded(); n != 0 {
		t.Fatal("a run holding a pending ticket left memory")
	}
	clock = clock.Add(2 * time.Hour) // the pending ticket expires; the approved one of an ended run is never used
	if n := p.SweepEnded(); n != 1 || p.Runs().Get("r-tickets") != nil {
		t.Fatalf("evicted %d once no ticket was pending", n)
	}
	list := p.Approvals(pipeline.ApprovalFilter{RunID: "r-tickets"})
	status := map[string]string{}
	for _, a := range list {
		status[a.Ticket] = a.Status
	}
	if len(list) != 3 || status[left] != pipeline.ApprovalExpired || status[used] != pipeline.ApprovalUsed ||
		status[unused] != pipeline.ApprovalApproved {
		t.Fatalf("tickets listed after eviction: %+v", list)
	}
	if a, err := p.Ticket(used); err != nil || a.Status != pipeline.ApprovalUsed || a.DecidedBy != "ops" {
		t.Fatalf("ticket after eviction: %+v %v", a, err)
	}
	if _, err := p.Decide(left, "approve", "ops"); err != pipeline.ErrTicketExpired {
		t.Fatalf("deciding an expired ticket of an evicted run: %v", err)
	}
	if _, err := p.Decide(used, "deny", "ops"); err != pipeline.ErrTicketClosed {
		t.Fatalf("deciding a used ticket of an evicted run: %v", err)
	}
	if _, err := p.Ticket("t-none"); err != pipeline.ErrNoTicket {
		t.Fatalf("unknown ticket: %v", err)
	}
}

// A restart keeps a live run's tool state: a repeated write is answered
// from its stored result, a cut result's full text is still served.
func TestToolStateSurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := openBolt(t, dir)
	p := toolPipelineOn(t, time.Now, st)
	if tt, _ := runTool(p, "r-restart", "write", `{"path":"a"}`, "written"); tt.Answer != nil {
		t.Fatalf("write: %+v", tt.Answer)
	}
	long := strings.Repeat("line of a long file\n", 400)
	_, read := runTool(p, "r-restart", "read", `{"path":"big"}`, long)
	st.Close()

	p2 := toolPipelineOn(t, time.Now, openBolt(t, dir))
	if n, err := p2.Restore(context.Background()); err != nil || n != 1 {
		t.Fatalf("restored %d runs: %v", n, err)
	}
	if text, err := p2.Blob(pipeline.BlobOfRun("r-restart"), read.Handle); err != nil || text != long {
		t.Fatalf("blob after a restart: %d bytes, %v", len(text), err)
	}
	tt, _ := runTool(p2, "r-restart", "write", `{"path":"a"}`, "written twice")
	if tt.Answer == nil || tt.Answer.Kind != pipeline.ToolReplayed {
		t.Fatalf("repeated write after a restart: %+v (executed again?)", tt.Answer)
	}
}

// A tool call a model asked for is found at the tool route by its
// arguments (canonically: other key order, other spacing) whatever agent
// made it: the route's call carries no agent id, so the run indexes the
// call as any agent's while its loop guard keeps the agent's own
// fingerprint.
func TestToolCallFoundByItsArguments(t *testing.T) {
	t.Parallel()
	for _, agent := range []string{"", "agent-7"} {
		t.Run("agent="+agent, func(t *testing.T) {
			t.Parallel()
			p := toolPipeline(t, nil)
			ctx := context.Background()
			body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Read it."}],"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`)
			mt := p.Begin(ctx, &pipeline.Call{Body: body, AgentID: agent}, openai.Chat{})
			p.Finish(ctx, mt, pipeline.Outcome{Status: 200, Body: []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\",\"limit\":10}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)})
			tt, _ := runTool(p, "", "read", `{ "limit": 10, "path": "a.go" }`, "package a")
			if tt.RunID() != mt.RunID() {
				t.Fatalf("the tool call went to run %q, not the model call's %q", tt.RunID(), mt.RunID())
			}
			other, _ := runTool(p, "", "read", `{"limit":10,"path":"b.go"}`, "package b")
			if other.RunID() == mt.RunID() {
				t.Fatalf("a call the model did not ask for was attributed to its run")
			}
		})
	}
}
