package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// scriptedModel stands in for OpenAI (chat and Responses) and Anthropic for
// the framework matrix. The agent's prompt names its script:
//
//	[script:toolN]  ask for read_page until N-1 tool results are in the
//	                history, then answer: an N-step run
//	[script:loop]   ask for read_page with the same arguments every time
//
// Every call asks for one tool or answers with text; usage is fixed.
//
// A prompt also carries its agent's id, "(#ID)": the model notes whether
// that agent's calls were streamed.
type scriptedModel struct {
	calls    atomic.Int64
	mu       sync.Mutex
	streamed map[string]bool
}

var (
	scriptRE  = regexp.MustCompile(`\[script:(tool(\d+)|loop)\]`)
	promptIDs = regexp.MustCompile(`\(#(\w+)\)`)
)

// wasStreamed reports whether any call of the agent with prompt id was
// streamed.
func (m *scriptedModel) wasStreamed(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.streamed[id]
}

func (m *scriptedModel) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/models") {
		writeJSON(w, 200, []byte(`{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"},{"id":"claude-haiku-4-5","object":"model"}]}`))
		return
	}
	n := int(m.calls.Add(1))
	stream, includeUsage := streamFlags(body)
	if id := promptIDs.FindSubmatch(body); id != nil {
		m.mu.Lock()
		if m.streamed == nil {
			m.streamed = map[string]bool{}
		}
		m.streamed[string(id[1])] = m.streamed[string(id[1])] || stream
		m.mu.Unlock()
	}
	results := 0
	for _, k := range []string{`"tool_call_id"`, `"tool_use_id"`, `"function_call_output"`} {
		results += strings.Count(string(body), k)
	}
	final, args := true, `{"page":1}`
	if s := scriptRE.FindSubmatch(body); s != nil && offersTools(body) {
		if string(s[1]) == "loop" {
			final = false
		} else {
			steps, _ := strconv.Atoi(string(s[2]))
			final = results >= steps-1
			args = fmt.Sprintf(`{"page":%d}`, results+1)
		}
	}
	text := fmt.Sprintf("Done after %d pages.", results)
	const in, out = 120, 30
	switch r.URL.Path {
	case "/v1/messages":
		anthropicAnswer(w, stream, n, final, text, args, in, out)
	case "/v1/responses":
		responsesAnswer(w, stream, n, final, text, args, in, out)
	default:
		openaiAnswer(w, stream, includeUsage, n, final, text, args, in, out)
	}
}

// responsesAnswer is one OpenAI Responses answer: text, or a read_page
// function call with args; streamed as the API streams it when stream.
func responsesAnswer(w http.ResponseWriter, stream bool, n int, final bool, text, args string, in, out int64) {
	responsesToolAnswer(w, stream, n, final, text, "read_page", args, in, out)
}

// responsesToolAnswer is responsesAnswer calling the tool named tool.
func responsesToolAnswer(w http.ResponseWriter, stream bool, n int, final bool, text, tool, args string, in, out int64) {
	id := fmt.Sprintf("resp_script%d", n)
	item := fmt.Sprintf(`{"type":"message","id":"msg_script%d","role":"assistant","status":"completed","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, n, text)
	if !final {
		item = fmt.Sprintf(`{"type":"function_call","id":"fc_script%d","call_id":"call_script_%d","name":%q,"arguments":%q,"status":"completed"}`, n, n, tool, args)
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`, in, out, in+out)
	response := func(status, output, usage string) string {
		return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1,"model":"gpt-4o-mini","status":%q,"error":null,"incomplete_details":null,"output":[%s],"usage":%s}`, id, status, output, usage)
	}
	if !stream {
		writeJSON(w, 200, []byte(response("completed", item, usage)))
		return
	}
	var b strings.Builder
	seq := 0
	ev := func(name, fields string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", name, name, seq, fields)
		seq++
	}
	ev("response.created", `"response":`+response("in_progress", "", "null"))
	if final {
		itemID := fmt.Sprintf("msg_script%d", n)
		ev("response.output_item.added", fmt.Sprintf(`"output_index":0,"item":{"type":"message","id":%q,"role":"assistant","status":"in_progress","content":[]}`, itemID))
		ev("response.content_part.added", fmt.Sprintf(`"output_index":0,"item_id":%q,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`, itemID))
		ev("response.output_text.delta", fmt.Sprintf(`"output_index":0,"item_id":%q,"content_index":0,"delta":%q,"logprobs":[]`, itemID, text))
		ev("response.output_text.done", fmt.Sprintf(`"output_index":0,"item_id":%q,"content_index":0,"text":%q,"logprobs":[]`, itemID, text))
	} else {
		itemID := fmt.Sprintf("fc_script%d", n)
		ev("response.output_item.added", fmt.Sprintf(`"output_index":0,"item":{"type":"function_call","id":%q,"call_id":"call_script_%d","name":%q,"arguments":"","status":"in_progress"}`, itemID, n, tool))
		ev("response.function_call_arguments.delta", fmt.Sprintf(`"output_index":0,"item_id":%q,"delta":%q`, itemID, args))
		ev("response.function_call_arguments.done", fmt.Sprintf(`"output_index":0,"item_id":%q,"arguments":%q`, itemID, args))
	}
	ev("response.output_item.done", `"output_index":0,"item":`+item)
	ev("response.completed", `"response":`+response("completed", item, usage))
	writeSSE(w, []byte(b.String()))
}
