package policy

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

var benchRun = RunInput{
	Principal: Principal{Tenant: "acme", Team: "red", User: "alice", KeyID: "k1"},
	Run: RunInfo{ID: "r-123", SessionID: "s-1", AgentID: "planner", TaskType: "lookup", State: "ready",
		Steps: 4, ModelCalls: 4, ToolCalls: 6, InputTokens: 8420, OutputTokens: 1930, ElapsedMs: 18420, CostUSD: 0.068},
	Headers: map[string]string{"x-task-type": "lookup"},
}

func BenchmarkBudget(b *testing.B) {
	e := newEngine(b, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Budget(ctx, benchRun); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkModel(b *testing.B) {
	ctx := context.Background()
	in := ModelInput{RunInput: benchRun, Model: ModelInfo{Name: "gpt-4o-mini", Provider: "openai", MaxOutputTokens: 1024}}
	for _, bc := range []struct {
		desc string
		opts Options
	}{
		{desc: "default-folded"},
		{desc: "allow-list-evaluated", opts: Options{Data: map[string]any{"models": map[string]any{"allowed": []string{"gpt-4o*"}, "max_output_tokens": 2000}}}},
	} {
		b.Run(bc.desc, func(b *testing.B) {
			e := newEngine(b, bc.opts)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Model(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkTool(b *testing.B) {
	ctx := context.Background()
	in := ToolInput{RunInput: benchRun, Tool: ToolInfo{Server: "fs", Name: "read_file", Fingerprint: "f00",
		Arguments: []byte(`{"path": "/var/data/orders.csv", "offset": 0, "limit": 4096}`)}}
	e := newEngine(b, Options{Data: registry})
	b.Run("ast-input", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Tool(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same evaluation with OPA's own input conversion (a JSON round
	// trip of the struct), for comparison with the AST-built input.
	b.Run("json-input", func(b *testing.B) {
		q := e.cur.Load().questions[qTool]
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.pq.Eval(ctx, rego.EvalInput(in)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ast-input-with-arguments", func(b *testing.B) {
		dir := writeDir(b, map[string]string{"args.rego": `package haltline.args
seen if input.tool.arguments.path`})
		e := newEngine(b, Options{Data: registry, Dir: dir})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Tool(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLoop(b *testing.B) {
	e := newEngine(b, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Loop(ctx, benchRun); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTermination(b *testing.B) {
	e := newEngine(b, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Termination(ctx, benchRun); err != nil {
			b.Fatal(err)
		}
	}
}
