package policy

import (
	"context"
	"strconv"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

var benchRun = RunInput{
	Principal: Principal{Tenant: "acme", Team: "red", User: "alice", KeyID: "k1"},
	Run: RunInfo{ID: "r-123", SessionID: "s-1", AgentID: "planner", TaskType: "lookup", State: "ready",
		Steps: 4, ModelCalls: 4, ToolCalls: 6, InputTokens: 8420, OutputTokens: 1930, ElapsedMs: 18420, CostUSD: 0.068},
	Headers: map[string]string{"x-task-type": "lookup"},
}

// benchNames are distinct values for a keyed input field: cycling through
// more of them than the cache holds makes every call a miss.
var benchNames = func() []string {
	n := make([]string, 4*DefaultMemoBytes/memoEntryBytes)
	for i := range n {
		n[i] = "n" + strconv.Itoa(i)
	}
	return n
}()

// benchArgs are distinct tool arguments of a realistic size.
var benchArgs = func() [][]byte {
	a := make([][]byte, len(benchNames))
	for i := range a {
		a[i] = []byte(`{"path": "/var/data/` + benchNames[i] + `.csv", "offset": 0, "limit": 4096}`)
	}
	return a
}()

// noCache turns the cache of the engine's current set off, for the
// "evaluated" baseline: the cost of a question without memoisation.
func noCache(e *Engine) *Engine {
	for _, q := range e.cur.Load().questions {
		q.memoised = false
	}
	return e
}

// benchCache measures one question three ways: evaluated (cache off),
// cache-hit (the same key every call) and cache-miss (a new key every call:
// evaluation plus building the key and storing the answer). ask gets the
// iteration number and whether to vary the keyed input.
func benchCache(b *testing.B, opts Options, ask func(e *Engine, i int, vary bool) error) {
	for _, bc := range []struct {
		desc  string
		cache bool
		vary  bool
	}{
		{desc: "evaluated"},
		{desc: "cache-hit", cache: true},
		{desc: "cache-miss", cache: true, vary: true},
	} {
		b.Run(bc.desc, func(b *testing.B) {
			e := newEngine(b, opts)
			if !bc.cache {
				noCache(e)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := ask(e, i, bc.vary); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkBudget(b *testing.B) {
	ctx := context.Background()
	benchCache(b, Options{}, func(e *Engine, i int, vary bool) error {
		in := benchRun
		if vary {
			in.Principal.Tenant = benchNames[i%len(benchNames)]
		}
		_, err := e.Budget(ctx, in)
		return err
	})
}

func BenchmarkModel(b *testing.B) {
	ctx := context.Background()
	in := ModelInput{RunInput: benchRun, Model: ModelInfo{Name: "gpt-4o-mini", Provider: "openai", MaxOutputTokens: 1024}}
	b.Run("default-folded", func(b *testing.B) {
		e := newEngine(b, Options{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Model(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("allow-list", func(b *testing.B) {
		opts := Options{Data: map[string]any{"models": map[string]any{"allowed": []string{"gpt-4o*"}, "max_output_tokens": 2000}}}
		benchCache(b, opts, func(e *Engine, i int, vary bool) error {
			in := in
			if vary {
				in.Model.Name = benchNames[i%len(benchNames)]
			}
			_, err := e.Model(ctx, in)
			return err
		})
	})
}

func BenchmarkTool(b *testing.B) {
	ctx := context.Background()
	in := ToolInput{RunInput: benchRun, Tool: ToolInfo{Server: "fs", Name: "read_file", Fingerprint: "f00",
		Hints:     map[string]bool{"readOnlyHint": true},
		Arguments: []byte(`{"path": "/var/data/orders.csv", "offset": 0, "limit": 4096}`)}}
	ask := func(e *Engine, i int, vary bool) error {
		in := in
		if vary {
			// Vary a keyed field whichever package is loaded.
			in.Tool.Name = benchNames[i%len(benchNames)]
			in.Tool.Arguments = benchArgs[i%len(benchArgs)]
		}
		_, err := e.Tool(ctx, in)
		return err
	}
	b.Run("ast-input", func(b *testing.B) { benchCache(b, Options{Data: registry}, ask) })
	// The same evaluation with OPA's own input conversion (a JSON round
	// trip of the struct), for comparison with the AST-built input.
	b.Run("json-input", func(b *testing.B) {
		e := newEngine(b, Options{Data: registry})
		q := e.cur.Load().questions[qTool]
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.pq.Eval(ctx, rego.EvalInput(in)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Another package reads the arguments: they enter the input, but not
	// the tool question's key.
	b.Run("ast-input-with-arguments", func(b *testing.B) {
		dir := writeDir(b, map[string]string{"args.rego": `package haltline.args
seen if input.tool.arguments.path`})
		benchCache(b, Options{Data: registry, Dir: dir}, ask)
	})
	// The tool package itself reads the arguments: the key holds their hash.
	b.Run("tool-reads-arguments", func(b *testing.B) {
		dir := writeDir(b, map[string]string{"tool.rego": `package haltline.tool
default allow := true

allow := false if startswith(input.tool.arguments.path, "/etc/")

decision := {"allow": allow, "level": "L1"}`})
		benchCache(b, Options{Data: registry, Dir: dir}, ask)
	})
}

func BenchmarkLoop(b *testing.B) {
	ctx := context.Background()
	benchCache(b, Options{}, func(e *Engine, i int, vary bool) error {
		in := benchRun
		if vary {
			in.Run.TaskType = benchNames[i%len(benchNames)]
		}
		_, err := e.Loop(ctx, in)
		return err
	})
}

func BenchmarkTermination(b *testing.B) {
	ctx := context.Background()
	benchCache(b, Options{}, func(e *Engine, i int, vary bool) error {
		in := benchRun
		if vary {
			in.Principal.Tenant = benchNames[i%len(benchNames)]
		}
		_, err := e.Termination(ctx, in)
		return err
	})
}
