package policy

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// memoData gives every default package something to vary on, so the
// answers differ across the table below.
var memoData = map[string]any{
	"budgets": map[string]any{
		"tenants":    map[string]any{"acme": map[string]any{"max_steps": 50}},
		"teams":      map[string]any{"red": map[string]any{"max_tokens": 1000, "tool_quotas": map[string]any{"search": 3}}},
		"users":      map[string]any{"alice": map[string]any{"max_cost_usd": 1.5}},
		"agents":     map[string]any{"planner": map[string]any{"deadline_ms": 60000}},
		"task_types": map[string]any{"lookup": map[string]any{"max_steps": 10}},
	},
	"loops": map[string]any{
		"long_task_types": []string{"research"},
		"task_types":      map[string]any{"strict": map[string]any{"same_in_row": 2}},
		"volatile_keys":   []string{"x-date"},
	},
	"terminations": map[string]any{
		"tenants":    map[string]any{"acme": map[string]any{"mode": "reject"}},
		"teams":      map[string]any{"red": map[string]any{"enforcement": map[string]any{"max_steps": "shadow"}}},
		"task_types": map[string]any{"chat": map[string]any{"mode": "finalize"}},
	},
	"tools":         registry["tools"],
	"tool_defaults": map[string]any{"use_hints": true, "denied": []string{"fs/write_file"}},
}

// decisions records the decision log of an engine.
type decisions struct {
	mu  sync.Mutex
	all []Decision
}

func (d *decisions) log(x Decision) {
	d.mu.Lock()
	d.all = append(d.all, x)
	d.mu.Unlock()
}

func (d *decisions) last(t *testing.T) Decision {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.all) == 0 {
		t.Fatal("no decision logged")
	}
	return d.all[len(d.all)-1]
}

// evaluate answers a question the uncached way, on the engine's current set.
func evaluate(t *testing.T, e *Engine, id questionID, input func(*set) ast.Value) any {
	t.Helper()
	s := e.cur.Load()
	v, err := s.evalFresh(context.Background(), id, input(s))
	if err != nil {
		t.Fatal(err)
	}
	a, err := decodeAnswer(id, v)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// settle waits until the answers the engine's current set put in its memo
// are kept (or dropped): ristretto applies a Set in the background, so an
// ask right after another may miss without it.
func settle(e *Engine) { e.cur.Load().memo.wait() }

func keyPaths(q *question) []string {
	var out []string
	for _, op := range q.key {
		out = append(out, op.String())
	}
	return out
}

func TestCacheKeysOfDefaults(t *testing.T) {
	t.Parallel()
	s := defaultEngine().cur.Load()
	for id, want := range map[questionID][]string{
		qBudget:      {"principal.tenant", "principal.team", "principal.user", "run.agent_id", "run.task_type"},
		qTool:        {"tool.name", "tool.server", "tool.level", "tool.hints"},
		qLoop:        {"run.task_type", "run.expected_steps"},
		qTermination: {"principal.tenant", "principal.team", "run.task_type"},
		qModel:       {"model.name"},
	} {
		q := s.questions[id]
		if !q.memoised {
			t.Errorf("%s: not cached", q.pkg)
			continue
		}
		if got := keyPaths(q); !slices.Equal(got, want) {
			t.Errorf("%s: key %q, want %q", q.pkg, got, want)
		}
	}
}

// TestCacheMatchesEvaluation asks the default policies over a table of
// inputs: every answer equals an uncached evaluation, and asking again, for
// another run that differs only in what the package does not read, is a
// cache hit with the same answer.
func TestCacheMatchesEvaluation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log decisions
	e := newEngine(t, Options{Data: memoData, DecisionLog: log.log})
	check := func(desc string, id questionID, ask func(run string) (any, error), input func(run string) func(*set) ast.Value) {
		t.Helper()
		want := evaluate(t, e, id, input("r-1"))
		for i, run := range []string{"r-1", "r-2"} {
			got, err := ask(run)
			settle(e)
			if err != nil {
				t.Fatalf("%s %s: %v", packages[id], desc, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %s: got %+v, want %+v", packages[id], desc, got, want)
			}
			// The first ask may hit too: an earlier row can share the
			// values this package reads.
			if d := log.last(t); (i == 1 && !d.Cached) || d.RunID != run {
				t.Fatalf("%s %s, ask %d: decision %+v", packages[id], desc, i, d)
			}
		}
	}

	n := 0
	for _, tenant := range []string{"", "acme", "globex"} {
		for _, team := range []string{"", "red", "blue"} {
			for _, user := range []string{"", "alice"} {
				for _, agent := range []string{"", "planner"} {
					for _, tt := range []string{"", "lookup", "research", "strict", "chat"} {
						for _, expected := range []int64{0, 250} {
							in := RunInput{Principal: Principal{Tenant: tenant, Team: team, User: user, KeyID: fmt.Sprint("k", n)},
								Run: RunInfo{AgentID: agent, TaskType: tt, ExpectedSteps: expected, Steps: int64(n)}}
							n++
							desc := fmt.Sprintf("%+v", in)
							withRun := func(run string) RunInput { in := in; in.Run.ID = run; return in }
							runInput := func(run string) func(*set) ast.Value {
								return func(s *set) ast.Value { return runValue(withRun(run), s) }
							}
							check(desc, qBudget, func(run string) (any, error) { return e.Budget(ctx, withRun(run)) }, runInput)
							check(desc, qLoop, func(run string) (any, error) { return e.Loop(ctx, withRun(run)) }, runInput)
							check(desc, qTermination, func(run string) (any, error) { return e.Termination(ctx, withRun(run)) }, runInput)
						}
					}
				}
			}
		}
	}

	for _, tool := range [][2]string{{"fs", "read_file"}, {"fs", "write_file"}, {"fs", "delete_file"}, {"fs", "chmod"}, {"", "search"}, {"", "rm"}} {
		for _, level := range []string{"", "L0", "L2"} {
			for _, hints := range []map[string]bool{nil, {"readOnlyHint": true}, {"destructiveHint": true}, {"destructiveHint": false, "readOnlyHint": true}} {
				for _, tenant := range []string{"", "acme"} {
					in := ToolInput{RunInput: RunInput{Principal: Principal{Tenant: tenant}},
						Tool: ToolInfo{Server: tool[0], Name: tool[1], Level: level, Hints: hints, Fingerprint: fmt.Sprint("f", n),
							Arguments: []byte(fmt.Sprintf(`{"n": %d}`, n))}}
					n++
					withRun := func(run string) ToolInput { in := in; in.Run.ID = run; return in }
					check(fmt.Sprintf("%+v", in.Tool), qTool,
						func(run string) (any, error) { return e.Tool(ctx, withRun(run)) },
						func(run string) func(*set) ast.Value {
							return func(s *set) ast.Value { return toolValue(withRun(run), s) }
						})
				}
			}
		}
	}
}

// TestCacheKeyIncludesReadPaths: a policy reading input.run.id gets one
// answer per run, and one reading a header one per header value (absent
// and empty are different).
func TestCacheKeyIncludesReadPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := writeDir(t, map[string]string{
		"budget.rego": `package haltline.budget
limits := {"max_steps": count(input.run.id)}
`,
		"termination.rego": `package haltline.termination
default mode := "finalize"
mode := "reject" if input.headers["x-strict"] == ""
`,
	})
	e := newEngine(t, Options{Dir: dir})
	q := e.cur.Load().questions[qBudget]
	if got := keyPaths(q); !q.memoised || !slices.Equal(got, []string{"run.id"}) {
		t.Fatalf("key %q", got)
	}
	for range 2 {
		for _, id := range []string{"a", "bb", "ccc", "bb"} {
			l, err := e.Budget(ctx, RunInput{Principal: Principal{Tenant: "acme"}, Run: RunInfo{ID: id}})
			if err != nil || l.MaxSteps != int64(len(id)) {
				t.Fatalf("run %q: max_steps %d, %v", id, l.MaxSteps, err)
			}
		}
	}
	for range 2 {
		for _, h := range []map[string]string{nil, {"x-strict": ""}, {"x-strict": "no"}, {"x-other": ""}} {
			a, err := e.Termination(ctx, RunInput{Headers: h})
			want := ModeFinalize
			if v, ok := h["x-strict"]; ok && v == "" {
				want = ModeReject
			}
			if err != nil || a.Mode != want {
				t.Fatalf("headers %v: mode %q, %v", h, a.Mode, err)
			}
		}
	}
}

// TestCacheDisabled: a package whose reads cannot be bounded, or whose
// answer is not a function of its input, is evaluated every time, and
// still answers right.
func TestCacheDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		desc, body string
	}{
		{"input whole", `_in := input
limits := {"max_steps": count(object.get(_in, ["run", "id"], ""))}`},
		{"input whole through a builtin", `limits := {"max_steps": count(json.filter(input, ["run/id"]).run.id)}`},
		{"walk over input", `limits := {"max_steps": count([v | walk(input, [p, v]); p == ["run", "id"]][0])}`},
		{"dynamic ref into input", `limits := {"max_steps": count(input[k].id)} if some k in ["run"]`},
		{"with input in a helper", `_n := count(input.run.id)
limits := {"max_steps": n} if n := _n with input as {"run": {"id": input.run.id}}`},
		{"nondeterministic builtin", `limits := {"max_steps": count(input.run.id) + (time.now_ns() * 0)}`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, Options{Dir: writeDir(t, map[string]string{"budget.rego": "package haltline.budget\n" + tc.body + "\n"})})
			if q := e.cur.Load().questions[qBudget]; q.memoised {
				t.Fatalf("cached with key %q", keyPaths(q))
			}
			for range 2 {
				for _, id := range []string{"a", "bb", "ccc"} {
					l, err := e.Budget(ctx, RunInput{Run: RunInfo{ID: id}})
					if err != nil || l.MaxSteps != int64(len(id)) {
						t.Fatalf("run %q: max_steps %d, %v", id, l.MaxSteps, err)
					}
				}
			}
		})
	}
}

// TestCacheDroppedOnReload: the cache belongs to the set, so new data (the
// Rego unchanged) gives new answers at once.
func TestCacheDroppedOnReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log decisions
	dir := writeDir(t, map[string]string{"data.json": `{"haltline": {"budgets": {"teams": {"red": {"max_steps": 5}}}}}`})
	e := newEngine(t, Options{Dir: dir, DecisionLog: log.log})
	in := RunInput{Principal: Principal{Team: "red"}}
	steps := func() int64 {
		t.Helper()
		l, err := e.Budget(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		settle(e)
		return l.MaxSteps
	}
	if steps() != 5 || steps() != 5 || !log.last(t).Cached {
		t.Fatal("want 5, the second from the cache")
	}
	writeFile(t, dir, "data.json", `{"haltline": {"budgets": {"teams": {"red": {"max_steps": 7}}}}}`)
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := steps(); got != 7 || log.last(t).Cached || log.last(t).Version != 2 {
		t.Fatalf("after reload: %d, %+v", got, log.last(t))
	}
	if steps() != 7 || !log.last(t).Cached {
		t.Fatal("the new set caches too")
	}
	// The same content loaded again is a new set: its memo starts empty.
	old := e.cur.Load().memo
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if e.cur.Load().memo == old {
		t.Fatal("a reload kept the memo")
	}
	if steps() != 7 || log.last(t).Cached {
		t.Fatalf("the first answer of a reloaded set: %+v", log.last(t))
	}
}

// TestCacheNeverStoresErrors: an input on which the policy fails is
// evaluated (and fails) every time; other inputs are cached as usual.
func TestCacheNeverStoresErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log decisions
	e := newEngine(t, Options{DecisionLog: log.log, Dir: writeDir(t, map[string]string{"budget.rego": `package haltline.budget
limits = {"max_steps": 1} if input.principal.tenant == "bad"
limits = {"max_steps": 2} if input.principal.tenant == "bad"
limits = {"max_steps": 3} if input.principal.tenant != "bad"
`})})
	budget := func(ctx context.Context, tenant string) (Limits, error) {
		l, err := e.Budget(ctx, RunInput{Principal: Principal{Tenant: tenant}})
		settle(e)
		return l, err
	}
	for range 3 {
		if _, err := budget(ctx, "bad"); err == nil || log.last(t).Cached {
			t.Fatalf("conflicting values must fail, every time: %v", err)
		}
	}
	for i := range 2 {
		if l, err := budget(ctx, "good"); err != nil || l.MaxSteps != 3 || log.last(t).Cached != (i == 1) {
			t.Fatalf("ask %d: %+v %v, %+v", i, l, err, log.last(t))
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := budget(cctx, "other"); err == nil {
		t.Fatal("a cancelled ask answered")
	}
	if l, err := budget(ctx, "other"); err != nil || l.MaxSteps != 3 || log.last(t).Cached {
		t.Fatalf("after a cancelled ask: %+v %v, %+v", l, err, log.last(t))
	}
}

// TestCachedAnswersAreCopies: what a caller does to the maps and slices of
// an answer never reaches the next caller.
func TestCachedAnswersAreCopies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := maps(memoData, map[string]any{"models": map[string]any{"allowed": []string{"gpt-4o*"}}})
	e := newEngine(t, Options{Data: data})
	in := RunInput{Principal: Principal{Team: "red"}}
	for range 3 {
		l, err := e.Budget(ctx, in)
		if err != nil || l.ToolQuotas["search"] != 3 {
			t.Fatalf("budget %+v %v", l, err)
		}
		l.ToolQuotas["search"] = 99

		lt, err := e.Loop(ctx, in)
		if err != nil || !slices.Contains(lt.VolatileKeys, "x-date") {
			t.Fatalf("loop %+v %v", lt, err)
		}
		lt.VolatileKeys[slices.Index(lt.VolatileKeys, "x-date")] = "changed"

		a, err := e.Termination(ctx, in)
		if err != nil || a.Enforcement["max_steps"] != Shadow {
			t.Fatalf("termination %+v %v", a, err)
		}
		a.Enforcement["max_steps"] = Enforce

		d, err := e.Model(ctx, ModelInput{RunInput: in, Model: ModelInfo{Name: "o1"}})
		if err != nil || len(d.Deny) != 1 || !strings.Contains(d.Deny[0], `"o1"`) || d.Allowed[0] != "gpt-4o*" {
			t.Fatalf("model %+v %v", d, err)
		}
		d.Deny[0], d.Allowed[0] = "changed", "changed"
	}
}

// maps merges b over a (one level), for test data.
func maps(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestCacheArguments: when the tool package reads the arguments, their hash
// is in the key: the same arguments hit, other arguments are evaluated.
func TestCacheArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log decisions
	e := newEngine(t, Options{DecisionLog: log.log, Dir: writeDir(t, map[string]string{"tool.rego": `package haltline.tool
default allow := true

allow := false if startswith(input.tool.arguments.path, "/etc/")

decision := {"allow": allow, "level": "L1"}
`})})
	if got := keyPaths(e.cur.Load().questions[qTool]); !slices.Equal(got, []string{"tool.arguments"}) {
		t.Fatalf("key %q", got)
	}
	for i := range 2 {
		for _, tc := range []struct {
			args  string
			allow bool
		}{
			{`{"path": "/etc/passwd"}`, false},
			{`{"path": "/tmp/x"}`, true},
			{`{"path":"/etc/shadow"}`, false},
			{`not json`, true},
			{``, true},
		} {
			d, err := e.Tool(ctx, ToolInput{Tool: ToolInfo{Name: "read", Arguments: []byte(tc.args)}})
			settle(e)
			if err != nil || d.Allow != tc.allow {
				t.Fatalf("%s: %+v %v", tc.args, d, err)
			}
			if got := log.last(t); got.Cached != (i == 1) {
				t.Fatalf("%s, ask %d: cached=%t", tc.args, i, got.Cached)
			}
		}
	}
}

// TestCacheBounded: distinct keys past the bound evict, they do not grow
// the cache: of all the answers put, at most what the bound pays for are
// still there.
func TestCacheBounded(t *testing.T) {
	t.Parallel()
	const entries = 1000
	var key []byte
	cost := func(i int) int64 { return int64(len(appendStr(key[:0], fmt.Sprint("tenant-", i)))) + memoEntryBytes }
	c := newMemo(entries * cost(0))
	for i := range 3 * entries {
		key = appendStr(key[:0], fmt.Sprint("tenant-", i))
		c.put(key, i)
	}
	c.wait()
	kept := 0
	for i := range 3 * entries {
		key = appendStr(key[:0], fmt.Sprint("tenant-", i))
		if v, ok := c.get(key); ok {
			if v != i {
				t.Fatalf("entry %d holds %v", i, v)
			}
			kept++
		}
	}
	if kept > entries || kept < entries/4 {
		t.Fatalf("%d entries kept, bound %d", kept, entries)
	}
}

// TestCacheDroppedPuts: a memo that keeps nothing (too small for one
// entry) answers as evaluation does, every time.
func TestCacheDroppedPuts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log decisions
	e := newEngine(t, Options{Data: memoData, DecisionLog: log.log, MemoBytes: 1})
	if q := e.cur.Load().questions[qBudget]; !q.memoised {
		t.Fatal("the budget question is not memoised")
	}
	in := RunInput{Principal: Principal{Tenant: "acme", Team: "red"}}
	want := evaluate(t, e, qBudget, func(s *set) ast.Value { return runValue(in, s) })
	for range 3 {
		l, err := e.Budget(ctx, in)
		settle(e)
		if err != nil || !reflect.DeepEqual(l, want) || log.last(t).Cached {
			t.Fatalf("%+v %v, want %+v; %+v", l, err, want, log.last(t))
		}
	}
}

// TestCacheMemoOff: a negative MemoBytes turns memoisation off.
func TestCacheMemoOff(t *testing.T) {
	t.Parallel()
	e := newEngine(t, Options{MemoBytes: -1})
	s := e.cur.Load()
	for _, q := range s.questions {
		if s.memo != nil || q.memoised {
			t.Fatalf("%s memoised", q.pkg)
		}
	}
	if l, err := e.Budget(context.Background(), RunInput{}); err != nil || l.MaxSteps == 0 {
		t.Fatalf("%+v %v", l, err)
	}
}

// TestCacheHashCollision: keys whose hashes collide never share an
// answer; the key itself is compared on a hit.
func TestCacheHashCollision(t *testing.T) {
	t.Parallel()
	c := newMemo(1 << 20)
	c.collide = true
	c.put([]byte("tenant-a"), "a")
	c.wait()
	if v, ok := c.get([]byte("tenant-a")); !ok || v != "a" {
		t.Fatalf("the stored key: %v %t", v, ok)
	}
	if v, ok := c.get([]byte("tenant-b")); ok {
		t.Fatalf("another key with the same hashes answered %v", v)
	}
}

// TestKeyFieldsCoverInput guards the field tables against input.go: every
// key of the objects the policy sees must be a known field, or a package
// reading a whole object would be keyed on part of it.
func TestKeyFieldsCoverInput(t *testing.T) {
	t.Parallel()
	s := &set{needsArgs: true, needsHeaders: true}
	run := RunInput{Headers: map[string]string{"a": "b"}}
	check := func(obj ast.Value, fields map[string]field, extra ...string) {
		t.Helper()
		for _, k := range obj.(ast.Object).Keys() {
			name := string(k.Value.(ast.String))
			if _, ok := fields[name]; !ok && !slices.Contains(extra, name) {
				t.Errorf("input field %q has no key field", name)
			}
		}
	}
	tv := toolValue(ToolInput{RunInput: run, Tool: ToolInfo{Hints: map[string]bool{"h": true}, Arguments: []byte(`{}`)}}, s).(ast.Object)
	check(tv, nil, "principal", "run", "headers", "tool")
	check(tv.Get(kPrincipal).Value, principalFields)
	check(tv.Get(kRun).Value, runFields)
	check(tv.Get(kTool).Value, toolFields, "hints", "arguments")
	mv := modelValue(ModelInput{RunInput: run}, s).(ast.Object)
	check(mv, nil, "principal", "run", "headers", "model")
	check(mv.Get(kModel).Value, modelFields)
}

// TestCacheConcurrentReload asks every question with varied keys while
// the data changes under it (run with -race): each answer is one of the
// two versions', and once reloading stops, the last version's.
func TestCacheConcurrentReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := func(steps int, level string) string {
		return fmt.Sprintf(`{"haltline": {"budgets": {"teams": {"red": {"max_steps": %d}}}, "tool_defaults": {"level": %q}}}`, steps, level)
	}
	dir := writeDir(t, map[string]string{"data.json": data(5, "L0")})
	e := newEngine(t, Options{Dir: dir})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				team := []string{"red", "blue"}[i%2]
				in := RunInput{Principal: Principal{Team: team, Tenant: fmt.Sprint("t", (g*7+i)%5)}, Run: RunInfo{TaskType: fmt.Sprint("tt", i%3)}}
				l, err := e.Budget(ctx, in)
				if err != nil || (team == "red" && l.MaxSteps != 5 && l.MaxSteps != 9) || (team == "blue" && l.MaxSteps != 100) {
					t.Errorf("budget %s: %d, %v", team, l.MaxSteps, err)
					return
				}
				d, err := e.Tool(ctx, ToolInput{RunInput: in, Tool: ToolInfo{Name: fmt.Sprint("x", i%4)}})
				if err != nil || (d.Level != LevelReadOnly && d.Level != LevelIrreversible) {
					t.Errorf("tool: %+v, %v", d, err)
					return
				}
				if _, err := e.Loop(ctx, in); err != nil {
					t.Error(err)
					return
				}
				if _, err := e.Termination(ctx, in); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 6 {
		if i%2 == 0 {
			writeFile(t, dir, "data.json", data(9, "L2"))
		} else {
			writeFile(t, dir, "data.json", data(5, "L0"))
		}
		if err := e.Reload(ctx); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	l, err := e.Budget(ctx, RunInput{Principal: Principal{Team: "red", Tenant: "t1"}, Run: RunInfo{TaskType: "tt1"}})
	d, terr := e.Tool(ctx, ToolInput{Tool: ToolInfo{Name: "x1"}})
	if err != nil || terr != nil || l.MaxSteps != 5 || d.Level != LevelReadOnly {
		t.Fatalf("after the last reload: %d %s, %v %v", l.MaxSteps, d.Level, err, terr)
	}
}
