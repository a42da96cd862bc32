package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Read-back (DESIGN §6): a forwarded request that holds cut tool output
// offers the model the gateway's read tool. When the model's answer calls
// it, the gateway answers the call itself and calls the model again within
// the same client request, so that the agent never sees the tool: it
// receives the final answer, or calls of its own tools.

// ReadBackChars is the default and the largest slice of a cut output one
// call of the read tool returns on a model route.
const ReadBackChars = 8000

// readToolDescription says what the read tool does, in every API.
const readToolDescription = "Returns characters of the full text of a tool result that was cut because it was long. " +
	"Pass the handle named in the cut result; offset (characters from the start, default 0) and length " +
	"(default and at most 8000) choose the slice."

// ReadBlobSchema is the JSON schema of the read tool's arguments.
const ReadBlobSchema = `{"type":"object","properties":{` +
	`"handle":{"type":"string","description":"the handle named in the cut result"},` +
	`"offset":{"type":"integer","description":"first character to return, from 0"},` +
	`"length":{"type":"integer","description":"how many characters to return"}},` +
	`"required":["handle"]}`

// readToolDefs is the read tool as each API defines a tool.
var readToolDefs = map[wire.API][]byte{
	wire.APIChat: []byte(`{"type":"function","function":{"name":"` + ReadBlobTool + `","description":` +
		strconv.Quote(readToolDescription) + `,"parameters":` + ReadBlobSchema + `}}`),
	wire.APIResponses: []byte(`{"type":"function","name":"` + ReadBlobTool + `","description":` +
		strconv.Quote(readToolDescription) + `,"parameters":` + ReadBlobSchema + `}`),
	wire.APIMessages: []byte(`{"name":"` + ReadBlobTool + `","description":` +
		strconv.Quote(readToolDescription) + `,"input_schema":` + ReadBlobSchema + `}`),
}

// offerReadTool adds the read tool to the tools of body, a request to
// forward, unless the agent offers a tool of that name itself.
func offerReadTool(api wire.API, body []byte) ([]byte, error) {
	def, ok := readToolDefs[api]
	if !ok {
		return body, nil
	}
	name := "tools.#.name"
	if api == wire.APIChat {
		name = "tools.#.function.name"
	}
	for _, n := range gjson.GetBytes(body, name).Array() {
		if n.String() == ReadBlobTool {
			return body, nil
		}
	}
	return sjson.SetRawBytes(body, "tools.-1", def)
}

// ReadBlobSlice answers a call of the read tool with args, its JSON
// arguments: the slice of the cut output asked for, or what is wrong (bad
// set). limit bounds the slice; 0 leaves it unbounded.
func (p *Pipeline) ReadBlobSlice(owner BlobOwner, args []byte, limit int) (text string, bad bool) {
	var a struct {
		Handle         string
		Offset, Length int
	}
	if json.Unmarshal(args, &a) != nil || a.Handle == "" {
		return ReadBlobTool + " needs a handle argument", true
	}
	full, err := p.Blob(owner, a.Handle)
	if err != nil {
		return "no cut result has the handle " + strconv.Quote(strings.ToValidUTF8(a.Handle[:min(len(a.Handle), 200)], "?")), true
	}
	if a.Offset < 0 || a.Length < 0 {
		return "offset and length count characters from 0", true
	}
	if limit > 0 && (a.Length == 0 || a.Length > limit) {
		a.Length = limit
	}
	if limit == 0 && a.Offset == 0 && a.Length == 0 {
		return full, false
	}
	n := utf8.RuneCountInString(full)
	from := min(a.Offset, n)
	to := n
	if a.Length > 0 {
		to = min(from+a.Length, n)
	}
	i := runeOffset(full, 0, from)
	j := runeOffset(full, i, to-from)
	return fmt.Sprintf("[characters %d to %d of %d]\n%s", from, to, n, full[i:j]), false
}

// runeOffset is the byte offset n characters after byte offset i of s.
func runeOffset(s string, i, n int) int {
	for ; n > 0 && i < len(s); n-- {
		_, sz := utf8.DecodeRuneInString(s[i:])
		i += sz
	}
	return i
}

// readBack notes an answer that calls the read tool of a request that
// offered it: the gateway answers it (ReadBack) instead of the agent. The
// agent's tools of the same answer are not delivered: they are not run,
// and the model may ask for them again once it has read. The caller holds
// the run's lock.
func (p *Pipeline) readBack(t *Turn, resp *wire.Response, now time.Time) bool {
	if !asksRead(t, resp) {
		return false
	}
	r := t.run
	// tool_calls counts the calls the agent received.
	r.Counters.ToolCalls -= int64(len(resp.ToolCalls))
	t.toolCalls = 0
	for _, tc := range resp.ToolCalls {
		detail := "answered by the gateway"
		if tc.Name != ReadBlobTool {
			detail = "not run: the model read a cut output first"
		}
		r.Record(now, runstate.Event{Type: runstate.EventReadBack, Tool: tc.Name, Step: t.step, Detail: detail})
	}
	t.readAnswer = &wire.Response{Text: resp.Text, ToolCalls: resp.ToolCalls}
	return true
}

// asksRead reports an answer that calls the read tool the turn offered.
func asksRead(t *Turn, resp *wire.Response) bool {
	if !t.readOffer {
		return false
	}
	for _, tc := range resp.ToolCalls {
		if tc.Name == ReadBlobTool {
			return true
		}
	}
	return false
}

// ReadBack answers the read tool's calls of the turn's answer, when it
// called the read tool (Finish noted it), and begins the next model call
// of the same client request: the request the turn forwarded, as the
// agent sent it, with the model's answer and the gateway's results after
// it. It returns nil when the answer is the agent's. The new turn is a
// model call of the run like any (its own reservation, usage and events);
// Finish must follow it.
func (p *Pipeline) ReadBack(ctx context.Context, t *Turn) *Turn {
	ans := t.readAnswer
	if ans == nil {
		return nil
	}
	t.readAnswer = nil
	owner := BlobOfTenant(t.run.Tenant)
	results := make([]string, len(ans.ToolCalls))
	for i, tc := range ans.ToolCalls {
		if tc.Name != ReadBlobTool {
			results[i] = notRunReading
			continue
		}
		results[i], _ = p.ReadBlobSlice(owner, tc.Arguments, ReadBackChars)
	}
	body, err := appendReadBack(t.Req.API, t.Call.Body, ans, results)
	call := *t.Call
	call.Body, call.readRound, call.run = body, t.Call.readRound+1, t.run
	if err != nil {
		next := &Turn{Call: &call, codec: t.codec, started: p.now()}
		next.Answer = errorAnswer(t.codec, wire.ErrBadGateway, "cannot read back a cut output: "+err.Error(), nil)
		return next
	}
	return p.Begin(ctx, &call, t.codec)
}

// ReadBackOffered reports that the forwarded request offers the gateway's
// read tool: the front end runs the call's rounds (ReadBack) before the
// client sees any of the answer.
func (t *Turn) ReadBackOffered() bool { return t.readOffer }

// notRunReading is the result of an agent's tool call in an answer that
// also read a cut output: the gateway ran neither for the agent.
const notRunReading = "Not run: a cut tool output was read first. Call this tool again if it is still needed."

// appendReadBack returns body, a request of api, with the model's answer
// ans and the results of its tool calls appended to the history.
func appendReadBack(api wire.API, body []byte, ans *wire.Response, results []string) ([]byte, error) {
	var err error
	add := func(path string, v any) {
		if err == nil {
			body, err = sjson.SetBytes(body, path, v)
		}
	}
	switch api {
	case wire.APIChat:
		type fn struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}
		type call struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function fn     `json:"function"`
		}
		calls := make([]call, len(ans.ToolCalls))
		for i, tc := range ans.ToolCalls {
			calls[i] = call{ID: tc.ID, Type: "function", Function: fn{Name: tc.Name, Arguments: string(tc.Arguments)}}
		}
		var content any
		if ans.Text != "" {
			content = ans.Text
		}
		add("messages.-1", map[string]any{"role": "assistant", "content": content, "tool_calls": calls})
		for i, tc := range ans.ToolCalls {
			add("messages.-1", map[string]any{"role": "tool", "tool_call_id": tc.ID, "content": results[i]})
		}
	case wire.APIResponses:
		if in := gjson.GetBytes(body, "input"); in.Type == gjson.String {
			add("input", []any{map[string]any{"role": "user", "content": in.String()}})
		}
		if ans.Text != "" {
			add("input.-1", map[string]any{"role": "assistant", "content": ans.Text})
		}
		for _, tc := range ans.ToolCalls {
			add("input.-1", map[string]any{"type": "function_call", "call_id": tc.ID, "name": tc.Name, "arguments": string(tc.Arguments)})
		}
		for i, tc := range ans.ToolCalls {
			add("input.-1", map[string]any{"type": "function_call_output", "call_id": tc.ID, "output": results[i]})
		}
	case wire.APIMessages:
		blocks := make([]any, 0, len(ans.ToolCalls)+1)
		if ans.Text != "" {
			blocks = append(blocks, map[string]any{"type": "text", "text": ans.Text})
		}
		out := make([]any, len(ans.ToolCalls))
		for i, tc := range ans.ToolCalls {
			input := json.RawMessage(tc.Arguments)
			if !json.Valid(input) {
				input = json.RawMessage(`{}`)
			}
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": input})
			out[i] = map[string]any{"type": "tool_result", "tool_use_id": tc.ID, "content": results[i]}
		}
		add("messages.-1", map[string]any{"role": "assistant", "content": blocks})
		add("messages.-1", map[string]any{"role": "user", "content": out})
	default:
		return nil, fmt.Errorf("no read-back for %s", api)
	}
	return body, err
}
