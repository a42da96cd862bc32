package contextmgr

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/haltline/haltline/wire"
)

// A seeded generator of agent conversations, rendered in each wire format
// from one neutral shape so that the same property is checked three times.

type genCall struct {
	id, name, args, result string
}

type genStep struct {
	text     string    // assistant text, may be empty when calls are made
	calls    []genCall // tool calls, answered by results
	followUp string    // a user message after the step
}

type genConv struct {
	system string
	task   string
	steps  []genStep
}

var words = strings.Fields("the service returned an error while reading the config file so we retry with a smaller batch and check logs for timeout latency region cluster node pod deployment rollback version build test passed failed")

func sentence(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	b.WriteByte('.')
	return b.String()
}

// toolOutput returns about size bytes of log-like tool output.
func toolOutput(r *rand.Rand, size int) string {
	var b strings.Builder
	for b.Len() < size {
		fmt.Fprintf(&b, "{\"ts\":\"2025-05-01T12:%02d:%02dZ\",\"level\":\"info\",\"msg\":\"%s\",\"n\":%d}\n", r.IntN(60), r.IntN(60), sentence(r, 6), r.IntN(100000))
	}
	return b.String()
}

func genConversation(r *rand.Rand, steps, maxOut int) genConv {
	g := genConv{
		system: "You are an SRE agent. " + sentence(r, 12),
		task:   "Find why the checkout service is slow. You must not restart production pods.\nAlways cite the log line. " + sentence(r, 10),
	}
	var prevResult string
	id := 0
	for s := 0; s < steps; s++ {
		var st genStep
		if r.IntN(3) > 0 {
			st.text = sentence(r, 5+r.IntN(15)) + " " + sentence(r, 8)
		}
		nc := r.IntN(4)
		if st.text == "" && nc == 0 {
			nc = 1
		}
		for c := 0; c < nc; c++ {
			id++
			out := toolOutput(r, 20+r.IntN(maxOut))
			if prevResult != "" && r.IntN(5) == 0 {
				out = prevResult // an identical repeat, for deduplication
			}
			prevResult = out
			st.calls = append(st.calls, genCall{
				id:     fmt.Sprintf("call_%04d", id),
				name:   []string{"query_logs", "read_file", "get_metrics"}[r.IntN(3)],
				args:   fmt.Sprintf(`{"q":"%s"}`, sentence(r, 3)),
				result: out,
			})
		}
		if nc == 0 || r.IntN(6) == 0 {
			st.followUp = sentence(r, 8)
			if r.IntN(2) == 0 {
				st.followUp += "\nYou must never delete data. " + sentence(r, 4)
			}
		}
		g.steps = append(g.steps, st)
	}
	// A conversation ends with what the agent sends the model: results or
	// a user message.
	last := &g.steps[len(g.steps)-1]
	if len(last.calls) == 0 && last.followUp == "" {
		last.followUp = sentence(r, 6)
	}
	return g
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

var toolsJSON = `[{"type":"function","function":{"name":"query_logs","description":"Query logs.","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}]`

func (g genConv) render(api wire.API) []byte {
	var msgs []string
	switch api {
	case wire.APIChat:
		msgs = append(msgs, mustJSON(map[string]any{"role": "system", "content": g.system}))
		msgs = append(msgs, mustJSON(map[string]any{"role": "user", "content": g.task}))
		for _, s := range g.steps {
			m := map[string]any{"role": "assistant", "content": nil}
			if s.text != "" {
				m["content"] = s.text
			}
			if len(s.calls) > 0 {
				var tcs []any
				for _, c := range s.calls {
					tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
				}
				m["tool_calls"] = tcs
			}
			msgs = append(msgs, mustJSON(m))
			for _, c := range s.calls {
				msgs = append(msgs, mustJSON(map[string]any{"role": "tool", "tool_call_id": c.id, "content": c.result}))
			}
			if s.followUp != "" {
				msgs = append(msgs, mustJSON(map[string]any{"role": "user", "content": s.followUp}))
			}
		}
		return []byte(`{"model":"gpt-4o","messages":[` + strings.Join(msgs, ",") + `],"tools":` + toolsJSON + `}`)
	case wire.APIResponses:
		msgs = append(msgs, mustJSON(map[string]any{"role": "user", "content": g.task}))
		for i, s := range g.steps {
			msgs = append(msgs, mustJSON(map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%d", i), "summary": []any{}}))
			if s.text != "" {
				msgs = append(msgs, mustJSON(map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": s.text}}}))
			}
			for _, c := range s.calls {
				msgs = append(msgs, mustJSON(map[string]any{"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.args}))
			}
			for _, c := range s.calls {
				msgs = append(msgs, mustJSON(map[string]any{"type": "function_call_output", "call_id": c.id, "output": c.result}))
			}
			if s.followUp != "" {
				msgs = append(msgs, mustJSON(map[string]any{"role": "user", "content": s.followUp}))
			}
		}
		return []byte(`{"model":"gpt-5","instructions":` + mustJSON(g.system) + `,"input":[` + strings.Join(msgs, ",") + `],"tools":[{"type":"function","name":"query_logs","parameters":{"type":"object"}}]}`)
	default:
		msgs = append(msgs, mustJSON(map[string]any{"role": "user", "content": g.task}))
		for _, s := range g.steps {
			var blocks []any
			if s.text != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": s.text})
			}
			for _, c := range s.calls {
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": json.RawMessage(c.args)})
			}
			msgs = append(msgs, mustJSON(map[string]any{"role": "assistant", "content": blocks}))
			var user []any
			for _, c := range s.calls {
				user = append(user, map[string]any{"type": "tool_result", "tool_use_id": c.id, "content": c.result})
			}
			if s.followUp != "" {
				user = append(user, map[string]any{"type": "text", "text": s.followUp})
			}
			if len(user) > 0 {
				msgs = append(msgs, mustJSON(map[string]any{"role": "user", "content": user}))
			}
		}
		return []byte(`{"model":"claude-sonnet-4-5","max_tokens":4096,"system":` + mustJSON(g.system) + `,"messages":[` + strings.Join(msgs, ",") + `],"tools":[{"name":"query_logs","input_schema":{"type":"object"}}]}`)
	}
}
