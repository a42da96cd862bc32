package pipeline_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
)

// readBackAPIs are a request of each API whose history holds one long
// tool output, and the model's answer calling tools (name, arguments).
var readBackAPIs = []struct {
	codec   wire.Codec
	request func(output string) string
	answer  func(calls [][2]string) string
	// toolNames is the path of the names of the request's tools.
	toolNames string
}{{
	codec: openai.Chat{},
	request: func(out string) string {
		return `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"go"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_p","type":"function","function":{"name":"read_page","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"call_p","content":` + strconv.Quote(out) + `}],` +
			`"tools":[{"type":"function","function":{"name":"read_page","parameters":{"type":"object"}}}]}`
	},
	answer: func(calls [][2]string) string {
		var tc []string
		for i, c := range calls {
			tc = append(tc, fmt.Sprintf(`{"id":"call_%d","type":"function","function":{"name":%q,"arguments":%q}}`, i, c[0], c[1]))
		}
		msg := `{"role":"assistant","content":"Done."}`
		if len(tc) > 0 {
			msg = `{"role":"assistant","content":null,"tool_calls":[` + strings.Join(tc, ",") + `]}`
		}
		return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":` + msg +
			`,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":300,"completion_tokens":20,"total_tokens":320}}`
	},
	toolNames: "tools.#.function.name",
}, {
	codec: openai.Responses{},
	request: func(out string) string {
		return `{"model":"gpt-5.5","input":[{"role":"user","content":"go"},` +
			`{"type":"function_call","call_id":"call_p","name":"read_page","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"call_p","output":` + strconv.Quote(out) + `}],` +
			`"tools":[{"type":"function","name":"read_page","parameters":{"type":"object"}}]}`
	},
	answer: func(calls [][2]string) string {
		var items []string
		for i, c := range calls {
			items = append(items, fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":%q,"arguments":%q,"status":"completed"}`, i, i, c[0], c[1]))
		}
		if len(items) == 0 {
			items = append(items, `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Done.","annotations":[]}]}`)
		}
		return `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5.5","output":[` + strings.Join(items, ",") +
			`],"usage":{"input_tokens":300,"output_tokens":20,"total_tokens":320}}`
	},
	toolNames: "tools.#.name",
}, {
	codec: anthropic.Messages{},
	request: func(out string) string {
		return `{"model":"claude-haiku-4-5","max_tokens":100,"messages":[{"role":"user","content":"go"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_p","name":"read_page","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_p","content":` + strconv.Quote(out) + `}]}],` +
			`"tools":[{"name":"read_page","input_schema":{"type":"object"}}]}`
	},
	answer: func(calls [][2]string) string {
		var blocks []string
		for i, c := range calls {
			blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d","name":%q,"input":%s}`, i, c[0], c[1]))
		}
		stop := "tool_use"
		if len(blocks) == 0 {
			blocks, stop = append(blocks, `{"type":"text","text":"Done."}`), "end_turn"
		}
		return `{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[` + strings.Join(blocks, ",") +
			`],"stop_reason":"` + stop + `","usage":{"input_tokens":300,"output_tokens":20}}`
	},
	toolNames: "tools.#.name",
}}

var handleRe = regexp.MustCompile(`handle (b-[0-9a-z]+)`)

// A model's call of the read tool is answered by the gateway with the
// slice it asked for, in the API's own history, and the next round goes
// upstream; an agent's tool in the same answer is not run. The rounds are
// bounded by the policy: the last one does not offer the tool.
func TestReadBackRounds(t *testing.T) {
	out := strings.Repeat("0123456789", 1000) // 10,000 characters
	for _, api := range readBackAPIs {
		t.Run(api.codec.API().String(), func(t *testing.T) {
			pol, err := policy.New(context.Background(), policy.Options{Data: map[string]any{"budgets": map[string]any{
				"defaults": map[string]any{"tool_output": map[string]any{"read_back": 2}}}}})
			if err != nil {
				t.Fatal(err)
			}
			p := pipeline.New(pipeline.Options{Policy: pol, Context: &contextmgr.Rewriter{}})
			ctx := context.Background()
			offered := func(tn *pipeline.Turn) bool {
				for _, n := range gjson.GetBytes(tn.UpstreamBody, api.toolNames).Array() {
					if n.String() == pipeline.ReadBlobTool {
						return true
					}
				}
				return false
			}
			tn := p.Begin(ctx, &pipeline.Call{API: api.codec.API(), Body: []byte(api.request(out)), RunID: "r-read", ReadsBack: true}, api.codec)
			if tn.Answer != nil || !tn.ReadBackOffered() || !offered(tn) {
				t.Fatalf("the first call offers the read tool: %v (answer %v)", tn.ReadBackOffered(), tn.Answer)
			}
			h := handleRe.FindSubmatch(tn.UpstreamBody)
			if h == nil {
				t.Fatal("the forwarded request names no handle")
			}
			read := [2]string{pipeline.ReadBlobTool, fmt.Sprintf(`{"handle":%q,"offset":3003,"length":6000}`, h[1])}
			ans := api.answer([][2]string{{"read_page", `{}`}, read})
			if a := p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: []byte(ans)}); a != nil {
				t.Fatalf("the answer was replaced: %s", a.Body)
			}
			for round := 1; round <= 2; round++ {
				next := p.ReadBack(ctx, tn)
				if next == nil || next.Answer != nil {
					t.Fatalf("round %d: no next call (%v)", round, next)
				}
				tn = next
				// What goes upstream: the slice is not cut again.
				fwd, err := api.codec.ParseRequest(tn.UpstreamBody)
				if err != nil {
					t.Fatalf("round %d: the forwarded request: %v", round, err)
				}
				rs := fwd.ToolResults
				if len(rs) < 1 || !strings.HasSuffix(string(rs[len(rs)-1].Content), "\n"+out[3003:9003]) {
					last := ""
					if len(rs) > 0 {
						last = string(rs[len(rs)-1].Content)
					}
					t.Fatalf("round %d: %d results, the last of %d bytes ends %q", round, len(rs), len(last), last[max(0, len(last)-120):])
				}
				if round == 1 && (len(rs) != 2 || !strings.HasPrefix(string(rs[0].Content), "Not run")) {
					t.Fatalf("round 1: the agent's tool has the result %q", rs[0].Content)
				}
				if tn.ReadBackOffered() != (round < 2) || offered(tn) != (round < 2) {
					t.Fatalf("round %d offers the read tool: %v", round, offered(tn))
				}
				ans = api.answer([][2]string{read})
				if round == 2 {
					ans = api.answer(nil)
				}
				if a := p.Finish(ctx, tn, pipeline.Outcome{Status: 200, Body: []byte(ans)}); a != nil {
					t.Fatalf("round %d: the answer was replaced: %s", round, a.Body)
				}
			}
			if p.ReadBack(ctx, tn) != nil {
				t.Fatal("a final answer was read back")
			}
			rec, _, _ := p.Record("r-read")
			if rec.ModelCalls != 3 || rec.AgentSteps != 1 || rec.ToolCalls != 0 || rec.Status != runstate.Completed {
				t.Fatalf("record: %d model calls, %d steps, %d tool calls, %s", rec.ModelCalls, rec.AgentSteps, rec.ToolCalls, rec.Status)
			}
			evs, _, _ := p.Events("r-read")
			var reads []string
			for _, e := range evs {
				if e.Type == runstate.EventReadBack {
					reads = append(reads, e.Tool)
				}
			}
			if strings.Join(reads, ",") != "read_page,"+pipeline.ReadBlobTool+","+pipeline.ReadBlobTool {
				t.Fatalf("read-back events: %v", reads)
			}
		})
	}
}
