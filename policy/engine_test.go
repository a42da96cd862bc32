package policy

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := writeDir(t, map[string]string{"data.json": `{"haltline": {"budgets": {
		"teams": {"red": {"max_steps": 50, "max_cost_usd": 2.5, "tool_quotas": {"search": 10}}},
		"task_types": {"lookup": {"max_steps": 10, "deadline_ms": 60000}}
	}}}`})
	pkgDir := writeDir(t, map[string]string{"budget.rego": `package haltline.budget
limits := {"max_steps": 3, "max_tokens": null, "paused_time": "freeze"} if input.run.task_type == "tiny"
`})
	for _, tc := range []struct {
		desc string
		dir  string
		in   RunInput
		want Limits
	}{
		{desc: "defaults", in: RunInput{}, want: DefaultLimits()},
		{
			desc: "team from data",
			dir:  dataDir,
			in:   RunInput{Principal: Principal{Team: "red"}},
			want: func() Limits {
				l := DefaultLimits()
				l.MaxSteps, l.MaxCostUSD, l.ToolQuotas = 50, 2.5, map[string]int64{"search": 10}
				return l
			}(),
		},
		{
			desc: "task type beats team",
			dir:  dataDir,
			in:   RunInput{Principal: Principal{Team: "red"}, Run: RunInfo{TaskType: "lookup"}},
			want: func() Limits {
				l := DefaultLimits()
				l.MaxSteps, l.DeadlineMs, l.MaxCostUSD, l.ToolQuotas = 10, 60000, 2.5, map[string]int64{"search": 10}
				return l
			}(),
		},
		{
			desc: "package override; missing keys keep Go defaults",
			dir:  pkgDir,
			in:   RunInput{Run: RunInfo{TaskType: "tiny"}},
			want: func() Limits {
				l := DefaultLimits()
				l.MaxSteps, l.PausedTime = 3, PausedFreeze
				return l
			}(),
		},
		{desc: "package override undefined → Go defaults", dir: pkgDir, in: RunInput{}, want: DefaultLimits()},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := defaultEngine()
			if tc.dir != "" {
				e = newEngine(t, Options{Dir: tc.dir})
			}
			got, err := e.Budget(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	allowDir := writeDir(t, map[string]string{"data.json": `{"haltline": {"models": {
		"allowed": ["gpt-4o*", "claude-*"], "max_output_tokens": 2000,
		"per_model": {"gpt-4o": {"max_output_tokens": 500}}
	}}}`})
	pkgDir := writeDir(t, map[string]string{"model.rego": `package haltline.model
deny contains "no streaming for red" if {
	input.principal.team == "red"
	input.model.stream
}
`})
	mi := func(team, name string, stream bool) ModelInput {
		return ModelInput{RunInput: RunInput{Principal: Principal{Team: team}}, Model: ModelInfo{Name: name, Stream: stream}}
	}
	for _, tc := range []struct {
		desc string
		dir  string
		in   ModelInput
		want ModelDecision
	}{
		{desc: "defaults allow", in: mi("", "gpt-4o-mini", false), want: ModelDecision{}},
		{
			desc: "allow list match and global cap",
			dir:  allowDir,
			in:   mi("", "claude-sonnet-4", false),
			want: ModelDecision{MaxOutputTokens: 2000, Allowed: []string{"claude-*", "gpt-4o*"}},
		},
		{
			desc: "per-model cap",
			dir:  allowDir,
			in:   mi("", "gpt-4o", false),
			want: ModelDecision{MaxOutputTokens: 500, Allowed: []string{"claude-*", "gpt-4o*"}},
		},
		{
			desc: "not in allow list",
			dir:  allowDir,
			in:   mi("", "o3", false),
			want: ModelDecision{Deny: []string{`model "o3" is not in the allowed list`}, MaxOutputTokens: 2000, Allowed: []string{"claude-*", "gpt-4o*"}},
		},
		{desc: "package override denies", dir: pkgDir, in: mi("red", "x", true), want: ModelDecision{Deny: []string{"no streaming for red"}}},
		{desc: "package override allows", dir: pkgDir, in: mi("red", "x", false), want: ModelDecision{}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := defaultEngine()
			if tc.dir != "" {
				e = newEngine(t, Options{Dir: tc.dir})
			}
			got, err := e.Model(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if got.Allow() != (len(tc.want.Deny) == 0) {
				t.Fatalf("Allow() = %v", got.Allow())
			}
		})
	}
}

func TestModelConstantOnlyWhenInputIndependent(t *testing.T) {
	t.Parallel()
	if !defaultEngine().cur.Load().questions[qModel].constant {
		t.Fatal("default haltline.model should be folded to a constant")
	}
	e := newEngine(t, Options{Data: map[string]any{"models": map[string]any{"allowed": []string{"a"}}}})
	if e.cur.Load().questions[qModel].constant {
		t.Fatal("an allow list depends on the model name; must not be folded")
	}
	e = newEngine(t, Options{Data: map[string]any{"models": map[string]any{"max_output_tokens": 100}}})
	q := e.cur.Load().questions[qModel]
	if q.constant {
		// The cap depends on _name only through per_model, which is unset.
		d, err := e.Model(context.Background(), ModelInput{Model: ModelInfo{Name: "z"}})
		if err != nil || d.MaxOutputTokens != 100 {
			t.Fatalf("folded answer = %+v, %v", d, err)
		}
	}
}

// registry is how the caller passes the config's tool levels (docs/design.md §10).
var registry = map[string]any{"tools": map[string]any{
	"fs": map[string]any{
		"read_file":   map[string]any{"level": "L0"},
		"write_file":  map[string]any{"level": "L1"},
		"delete_file": map[string]any{"level": "L2"},
	},
	"": map[string]any{"search": map[string]any{"level": "L0"}},
}}

func TestTool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := newEngine(t, Options{Data: registry})
	// The directory's data overrides the config's registry.
	overDir := writeDir(t, map[string]string{"data.json": `{"haltline": {
		"tools": {"fs": {"write_file": {"level": "L2"}, "delete_file": {"deny": true}}},
		"tool_defaults": {"level": "L0"}
	}}`})
	over := newEngine(t, Options{Dir: overDir, Data: registry})
	pkgDir := writeDir(t, map[string]string{"tool.rego": `package haltline.tool
decision := {"allow": false, "level": "L0", "reason": "no rm -rf"} if contains(input.tool.arguments.cmd, "rm -rf")
`})
	pkg := newEngine(t, Options{Dir: pkgDir})
	ti := func(server, name string) ToolInput {
		return ToolInput{Tool: ToolInfo{Server: server, Name: name, Fingerprint: "fp"}}
	}
	for _, tc := range []struct {
		desc string
		e    *Engine
		in   ToolInput
		want ToolDecision
	}{
		{desc: "defaults: unknown tool gets L1", e: defaultEngine(), in: ti("x", "y"),
			want: ToolDecision{Allow: true, Level: "L1", Reason: "tool is not in the registry; default level"}},
		{desc: "registry L0", e: reg, in: ti("fs", "read_file"), want: ToolDecision{Allow: true, Level: "L0"}},
		{desc: "registry http tool", e: reg, in: ti("", "search"), want: ToolDecision{Allow: true, Level: "L0"}},
		{desc: "registry L2 needs approval", e: reg, in: ti("fs", "delete_file"),
			want: ToolDecision{Allow: true, Approval: true, Level: "L2", Reason: "L2 requires human approval"}},
		{desc: "caller-resolved level", e: defaultEngine(), in: ToolInput{Tool: ToolInfo{Name: "n", Level: "L2"}},
			want: ToolDecision{Allow: true, Approval: true, Level: "L2", Reason: "L2 requires human approval"}},
		{desc: "dir data raises a level", e: over, in: ti("fs", "write_file"),
			want: ToolDecision{Allow: true, Approval: true, Level: "L2", Reason: "L2 requires human approval"}},
		{desc: "dir data denies", e: over, in: ti("fs", "delete_file"),
			want: ToolDecision{Allow: false, Level: "L2", Reason: "denied by the tool registry"}},
		{desc: "dir data default level", e: over, in: ti("fs", "other"),
			want: ToolDecision{Allow: true, Level: "L0", Reason: "tool is not in the registry; default level"}},
		{desc: "package reads arguments", e: pkg,
			in:   ToolInput{Tool: ToolInfo{Name: "sh", Arguments: []byte(`{"cmd": "rm -rf /"}`)}},
			want: ToolDecision{Allow: false, Level: "L0", Reason: "no rm -rf"}},
		{desc: "package undefined → policy default", e: pkg,
			in:   ToolInput{Tool: ToolInfo{Name: "sh", Arguments: []byte(`{"cmd": "ls"}`)}},
			want: ToolDecision{Allow: true, Level: "L1"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got, err := tc.e.Tool(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if !pkg.cur.Load().needsArgs || reg.cur.Load().needsArgs {
		t.Fatal("arguments must be passed only when a rule reads them")
	}
}

func TestLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := writeDir(t, map[string]string{"data.json": `{"haltline": {"loops": {
		"long_task_types": ["research"], "volatile_keys": ["x-amz-date"],
		"task_types": {"strict": {"same_in_row": 2, "semantic_similarity": 0.7}}
	}}}`})
	pkgDir := writeDir(t, map[string]string{"loop.rego": `package haltline.loop
same_in_row := 4
volatile_keys := ["only"]
`})
	long := LoopThresholds{SameInRow: 5, Window: 8, WindowRepeats: 5, MaxCyclePeriod: 3, StallSteps: 5,
		SemanticRepeats: 5, SemanticWindow: 8, SemanticSimilarity: 0.5, VolatileKeys: DefaultVolatileKeys()}
	for _, tc := range []struct {
		desc string
		dir  string
		in   RunInput
		want func() LoopThresholds
	}{
		{desc: "defaults", want: DefaultLoopThresholds},
		{desc: "long by expected steps", in: RunInput{Run: RunInfo{ExpectedSteps: 150}}, want: func() LoopThresholds { return long }},
		{desc: "long by task type", dir: dataDir, in: RunInput{Run: RunInfo{TaskType: "research"}}, want: func() LoopThresholds {
			l := long
			l.VolatileKeys = append(DefaultVolatileKeys(), "x-amz-date")
			slices.Sort(l.VolatileKeys)
			return l
		}},
		{desc: "task type override", dir: dataDir, in: RunInput{Run: RunInfo{TaskType: "strict"}}, want: func() LoopThresholds {
			l := DefaultLoopThresholds()
			l.SameInRow, l.SemanticSimilarity = 2, 0.7
			l.VolatileKeys = append(l.VolatileKeys, "x-amz-date")
			slices.Sort(l.VolatileKeys)
			return l
		}},
		{desc: "package override; rest Go defaults", dir: pkgDir, want: func() LoopThresholds {
			l := DefaultLoopThresholds()
			l.SameInRow, l.VolatileKeys = 4, []string{"only"}
			return l
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := defaultEngine()
			if tc.dir != "" {
				e = newEngine(t, Options{Dir: tc.dir})
			}
			got, err := e.Loop(ctx, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.want(); !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestTermination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := writeDir(t, map[string]string{"data.json": `{"haltline": {"terminations": {
		"enforcement": {"max_steps": "shadow"},
		"teams": {"red": {"mode": "reject", "enforcement": {"cost_budget": "shadow"}}}
	}}}`})
	badDir := writeDir(t, map[string]string{"termination.rego": `package haltline.termination
mode := "explode" if input.principal.team == "red"
`})
	for _, tc := range []struct {
		desc    string
		dir     string
		in      RunInput
		want    TerminationAnswer
		wantErr string
	}{
		{desc: "defaults", want: TerminationAnswer{Mode: ModeFinalize}},
		{desc: "data: shadow line", dir: dataDir, want: TerminationAnswer{Mode: ModeFinalize, Enforcement: map[string]string{"max_steps": Shadow}}},
		{desc: "data: team rejects", dir: dataDir, in: RunInput{Principal: Principal{Team: "red"}},
			want: TerminationAnswer{Mode: ModeReject, Enforcement: map[string]string{"max_steps": Shadow, "cost_budget": Shadow}}},
		{desc: "unknown mode is an error", dir: badDir, in: RunInput{Principal: Principal{Team: "red"}}, wantErr: `want one of`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := defaultEngine()
			if tc.dir != "" {
				e = newEngine(t, Options{Dir: tc.dir})
			}
			got, err := e.Termination(ctx, tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if got.EnforcementOf("deadline") != Enforce {
				t.Fatal("unlisted line must be enforced")
			}
		})
	}
}

// TestSemanticRepeatLine: the semantic detector's line is shadow unless
// policy lists it, whatever else the termination answer says.
func TestSemanticRepeatLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	got, err := defaultEngine().Termination(ctx, RunInput{})
	if err != nil {
		t.Fatal(err)
	}
	if got.EnforcementOf(LineSemanticRepeat) != Shadow || got.EnforcementOf("loop_detected") != Enforce {
		t.Errorf("defaults: semantic_repeat %s, loop_detected %s", got.EnforcementOf(LineSemanticRepeat), got.EnforcementOf("loop_detected"))
	}
	dir := writeDir(t, map[string]string{"data.json": `{"haltline": {"terminations": {
		"teams": {"red": {"enforcement": {"semantic_repeat": "enforce"}}}
	}}}`})
	e := newEngine(t, Options{Dir: dir})
	for team, want := range map[string]string{"red": Enforce, "blue": Shadow} {
		got, err := e.Termination(ctx, RunInput{Principal: Principal{Team: team}})
		if err != nil {
			t.Fatal(err)
		}
		if got.EnforcementOf(LineSemanticRepeat) != want {
			t.Errorf("team %s: semantic_repeat %s, want %s", team, got.EnforcementOf(LineSemanticRepeat), want)
		}
	}
	bad := writeDir(t, map[string]string{"data.json": `{"haltline": {"loops": {"defaults": {"semantic_similarity": 1.5}}}}`})
	if _, err := New(ctx, Options{Dir: bad}); err == nil || !strings.Contains(err.Error(), "semantic_similarity") {
		t.Errorf("similarity 1.5: err = %v", err)
	}
}

func TestTeamWindows(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{"data.json": `{"haltline": {"teams": {
		"red": {"daily": {"max_cost_usd": 20}, "hourly": {"max_tokens": 100000}, "sprint": {"period_s": 1209600, "max_cost_usd": 200}},
		"blue": {"monthly": {"max_cost_usd": 500}}
	}}}`})
	e := newEngine(t, Options{Dir: dir})
	for _, tc := range []struct {
		desc string
		team string
		want []TeamWindow
	}{
		{desc: "several windows, sorted", team: "red", want: []TeamWindow{
			{Team: "red", Name: "daily", Period: 24 * time.Hour, Limits: Limits{MaxCostUSD: 20}},
			{Team: "red", Name: "hourly", Period: time.Hour, Limits: Limits{MaxTokens: 100000}},
			{Team: "red", Name: "sprint", Period: 14 * 24 * time.Hour, Limits: Limits{MaxCostUSD: 200}},
		}},
		{desc: "monthly is 30 days", team: "blue", want: []TeamWindow{
			{Team: "blue", Name: "monthly", Period: 30 * 24 * time.Hour, Limits: Limits{MaxCostUSD: 500}},
		}},
		{desc: "no windows", team: "green"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := e.TeamWindows(tc.team); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	bad := writeDir(t, map[string]string{"data.json": `{"haltline": {"teams": {"red": {"fortnightly": {"max_cost_usd": 1}}}}}`})
	if _, err := New(context.Background(), Options{Dir: bad}); err == nil || !strings.Contains(err.Error(), "fortnightly") {
		t.Fatalf("unknown window without period_s: err = %v", err)
	}
}

// TestEvalErrorNeverAllows: a rule that conflicts at runtime yields an
// error and a zero decision, never an allow.
func TestEvalErrorNeverAllows(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{
		"tool.rego": `package haltline.tool
decision := {"allow": true, "level": "L0"} if input.tool.name == "a"
decision := {"allow": false, "level": "L0"} if startswith(input.tool.name, "a")
`,
		"model.rego": `package haltline.model
max_output_tokens := 1 if input.model.name == "m"
max_output_tokens := 2 if input.model.stream
`,
	})
	e := newEngine(t, Options{Dir: dir})
	ctx := context.Background()
	d, err := e.Tool(ctx, ToolInput{Tool: ToolInfo{Name: "a"}})
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Package != "haltline.tool" {
		t.Fatalf("err = %v, want an EvalError of haltline.tool", err)
	}
	if d.Allow {
		t.Fatal("an eval error must never allow")
	}
	if _, err := e.Model(ctx, ModelInput{Model: ModelInfo{Name: "m", Stream: true}}); err == nil {
		t.Fatal("model conflict: want an error")
	}
	// Other inputs still get answers.
	if d, err := e.Tool(ctx, ToolInput{Tool: ToolInfo{Name: "b"}}); err != nil || !d.Allow {
		t.Fatalf("b: %+v %v", d, err)
	}
}

func TestNoIOBuiltins(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{"model.rego": `package haltline.model
deny contains "x" if http.send({"method": "GET", "url": "http://127.0.0.1:1"}).status_code != 200
`})
	_, err := New(context.Background(), Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "model.rego:2") {
		t.Fatalf("http.send must not compile; err = %v", err)
	}
}

func TestDecisionLog(t *testing.T) {
	t.Parallel()
	for _, summaries := range []bool{true, false} {
		var got []Decision
		e := newEngine(t, Options{Data: registry, DecisionSummaries: summaries, DecisionLog: func(d Decision) { got = append(got, d) }})
		in := ToolInput{RunInput: RunInput{Run: RunInfo{ID: "r-1"}}, Tool: ToolInfo{Server: "fs", Name: "delete_file", Arguments: []byte(`{"path": "/secret"}`)}}
		if _, err := e.Tool(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Model(context.Background(), ModelInput{RunInput: RunInput{Run: RunInfo{ID: "r-1"}}, Model: ModelInfo{Name: "m"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Budget(context.Background(), RunInput{Run: RunInfo{ID: "r-1"}}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("got %d decisions", len(got))
		}
		d := got[0]
		if d.Package != "haltline.tool" || d.RunID != "r-1" || d.Subject != "fs/delete_file" || d.Version != 1 {
			t.Fatalf("decision = %+v", d)
		}
		if !strings.HasPrefix(d.Fingerprint, "sha256:") || strings.Contains(d.Fingerprint+d.Summary, "secret") {
			t.Fatalf("arguments must appear only hashed: %+v", d)
		}
		if d.Verdict != "allow" || got[1].Verdict != "allow" || got[2].Verdict != "" {
			t.Fatalf("verdicts %q %q %q, want allow, allow and none for an answer", d.Verdict, got[1].Verdict, got[2].Verdict)
		}
		if summaries != strings.Contains(d.Summary, "approval=true") || summaries != (got[2].Summary != "") {
			t.Fatalf("summaries %v: %q, %q", summaries, d.Summary, got[2].Summary)
		}
		if !got[1].Constant || got[1].Package != "haltline.model" {
			t.Fatalf("model decision = %+v", got[1])
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc  string
		files map[string]string
		want  string
	}{
		{desc: "parse error names file and line", files: map[string]string{"tool.rego": "package haltline.tool\n\ndecision := {\n"}, want: "tool.rego:"},
		{desc: "compile error names file and line", files: map[string]string{"loop.rego": "package haltline.loop\nwindow := undefined_fn(1)\n"}, want: "loop.rego:2"},
		{desc: "bad data.json names line", files: map[string]string{"data.json": "{\n\"haltline\": {\n,}}"}, want: "data.json:3"},
		{desc: "wrong answer type", files: map[string]string{"budget.rego": "package haltline.budget\nlimits := {\"max_steps\": \"many\"}\n"}, want: "limits: max_steps: want a number"},
		{desc: "data at a package path", files: map[string]string{"data.json": `{"haltline": {"loop": {"long_task_types": ["x"]}}}`}, want: "data.haltline.loops"},
		{desc: "v0 syntax refused", files: map[string]string{"model.rego": "package haltline.model\ndeny[msg] { msg := \"x\" }\n"}, want: "model.rego:2"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			_, err := New(context.Background(), Options{Dir: writeDir(t, tc.files)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// tool_output is read per tenant, team and task type like every limit,
// and per tool name within it; a stored answer without it still cuts.
func TestBudgetToolOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := writeDir(t, map[string]string{"data.json": `{"haltline": {"budgets": {
		"teams": {"red": {"tool_output": {"inline": 8000, "read_back": 1, "tools": {"read_file": {"cut": false}}}}},
		"tenants": {"acme": {"tool_output": {"cut": false, "read_back": 0, "tools": {"query_logs": {"cut": true}}}}}
	}}}`})
	e := newEngine(t, Options{Dir: dir})
	red, err := e.Budget(ctx, RunInput{Principal: Principal{Team: "red"}})
	if err != nil {
		t.Fatal(err)
	}
	if o := red.ToolOutput; o.Inline != 8000 || o.Head != 1500 || o.Tail != 500 || !o.Keeps("read_file") || o.Keeps("query_logs") || o.Rounds() != 1 {
		t.Fatalf("team red: %+v", o)
	}
	acme, err := e.Budget(ctx, RunInput{Principal: Principal{Tenant: "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if o := acme.ToolOutput; !o.Keeps("read_file") || o.Keeps("query_logs") || o.Rounds() != 0 {
		t.Fatalf("tenant acme: %+v", o)
	}
	if (ToolOutput{}).Keeps("read_file") || (ToolOutput{}).Rounds() != ReadBackRounds {
		t.Fatal("the zero value forwards output whole, or reads none back")
	}
}
