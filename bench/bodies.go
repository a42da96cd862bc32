package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// API formats the harness speaks.
const (
	apiOpenAI    = "openai"
	apiAnthropic = "anthropic"
)

// Request sizes of the issue.
const (
	size2KB   = 2 << 10
	size200KB = 200 << 10
)

// workload hands out the requests of many agent runs in parallel (see the
// package comment): request i belongs to slot i%slots, is step
// (i/slots)%steps of that slot's current run, and a slot starts a new run
// after steps requests. Bodies are built per request because each carries
// its run's name and the tool calls the mock made for it.
type workload struct {
	api  string
	size int // exact body size in bytes; the system prompt is padded to it
	// toolOutput: each tool result is logOutputSize bytes of JSON log
	// lines (logOutput), not a one-line observation.
	toolOutput bool
	steps      int
	slots      int
	stream     bool
	tag        string // makes run ids unique per phase and target
	// lineage: no X-Run-Id (the -lineage flag); run ids then only name
	// the tool calls, and a step is not sent before the answer to the one
	// before it (see waitAnswer).
	lineage bool
	n       atomic.Uint64

	mu       sync.Mutex
	answered *sync.Cond          // on mu, broadcast when done grows
	done     map[uint64]struct{} // answered steps whose next step has not asked yet
}

// next returns the index, run id and body of the next request.
func (w *workload) next() (uint64, string, []byte) {
	i := w.n.Add(1) - 1
	slot, step := w.position(i)
	gen := i / uint64(w.slots) / uint64(w.steps)
	run := w.tag + "-" + strconv.FormatUint(slot, 10) + "-" + strconv.FormatUint(gen, 10)
	if w.lineage && step > 0 {
		w.waitAnswer(i - uint64(w.slots))
	}
	return i, run, buildBody(w.api, run, step, w.size, w.stream, w.toolOutput)
}

// position is request i's slot and its step in the slot's run.
func (w *workload) position(i uint64) (slot uint64, step int) {
	if w.stream {
		return i % uint64(w.slots), 0 // a streamed answer is a final one: one-step runs
	}
	return i % uint64(w.slots), int(i / uint64(w.slots) % uint64(w.steps))
}

// answerWait bounds how long a step waits for the answer to its run's
// step before (the load generator's request timeout).
const answerWait = 30 * time.Second

// waitAnswer blocks until request prev, the step before, was answered (or
// answerWait passed). With -lineage the gateway finds a step's run by the
// tool calls of the answer before it, which an agent has always received
// before it sends the next step; an open-loop load would send each step on
// time whatever, and a step whose predecessor was slow would start a run
// of its own — the harness's doing, not the gateway's.
func (w *workload) waitAnswer(prev uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.initAnswers()
	if _, ok := w.done[prev]; !ok {
		expired := false
		t := time.AfterFunc(answerWait, func() {
			w.mu.Lock()
			expired = true
			w.answered.Broadcast()
			w.mu.Unlock()
		})
		defer t.Stop()
		for _, ok = w.done[prev]; !ok && !expired; _, ok = w.done[prev] {
			w.answered.Wait()
		}
	}
	delete(w.done, prev)
}

// answer records that request i was answered (with -lineage; an error
// counts: the step after it is sent all the same). A run's last step has
// no step after it to wait.
func (w *workload) answer(i uint64) {
	if w.stream || (i/uint64(w.slots))%uint64(w.steps) == uint64(w.steps-1) {
		return
	}
	w.mu.Lock()
	w.initAnswers()
	w.done[i] = struct{}{}
	w.answered.Broadcast()
	w.mu.Unlock()
}

// initAnswers makes the answers' state on first use; the caller holds mu.
func (w *workload) initAnswers() {
	if w.done == nil {
		w.answered = sync.NewCond(&w.mu)
		w.done = map[uint64]struct{}{}
	}
}

// indexParam carries a request's index in its URL with -lineage, so that
// its result names it (vegeta's results carry the URL, not the body).
const indexParam = "?haltline-bench-request="

// requestURL is the URL of request i.
func (w *workload) requestURL(base string, i uint64) string {
	if !w.lineage {
		return base
	}
	return base + indexParam + strconv.FormatUint(i, 10)
}

// requestIndex reads the index requestURL put in url.
func requestIndex(url string) (uint64, bool) {
	_, v, ok := strings.Cut(url, indexParam)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseUint(v, 10, 64)
	return i, err == nil
}

// header returns the headers of one request of run.
func (w *workload) header(run string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if w.api == apiAnthropic {
		h.Set("X-Api-Key", "sk-ant-bench-agent")
		h.Set("Anthropic-Version", "2023-06-01")
	} else {
		h.Set("Authorization", "Bearer sk-bench-agent")
	}
	if !w.lineage {
		h.Set("X-Run-Id", run)
	}
	return h
}

// path is the model route of the workload's API.
func (w *workload) path() string {
	if w.api == apiAnthropic {
		return "/v1/messages"
	}
	return "/v1/chat/completions"
}

// padText fills system prompts up to the requested size: plain prose, no
// character that JSON would escape, so size in bytes is size on the wire.
var padText = strings.Repeat("You are the order desk assistant of a mail-order shop. Answer from tool results only, cite order numbers, "+
	"and never invent a status. Prefer one precise tool call to several vague ones. ", (size200KB/170)+8)

const (
	userAsk       = "Find the open orders of customer 4711 and summarise their status."
	openAITools   = `[{"type":"function","function":{"name":"search_orders","description":"Search the order book, one page at a time.","parameters":{"type":"object","properties":{"page":{"type":"integer"},"customer":{"type":"integer"}},"required":["page"]}}}]`
	anthropicTool = `[{"name":"search_orders","description":"Search the order book, one page at a time.","input_schema":{"type":"object","properties":{"page":{"type":"integer"},"customer":{"type":"integer"}},"required":["page"]}}]`
)

// observation is the tool result of step j: distinct at every step, so the
// loop guard sees progress.
func observation(j int) string {
	n := strconv.Itoa(1000 + 37*j)
	return "page " + strconv.Itoa(j) + ": order " + n + " shipped, order " + n + "1 pending; more pages available"
}

// logOutputSize is the length of a tool result of log lines, before JSON
// escapes it.
const logOutputSize = 64 << 10

// logLines holds the body text of logOutput for each step, escaped for a
// JSON string; built once, as the load generator shares the gateway's
// machine.
var logLines struct {
	sync.Mutex
	steps map[int][]byte
}

// logOutput is the tool result of step j of run as a tool that returns a
// service's JSON log would: logOutputSize bytes of JSON lines with Windows
// paths, escaped into a JSON string, where a backslash comes every few
// bytes. Its first line names the run and the step, so every result is
// distinct and the loop guard sees progress.
func logOutput(b []byte, run string, j int) []byte {
	logLines.Lock()
	if logLines.steps == nil {
		logLines.steps = map[int][]byte{}
	}
	text, ok := logLines.steps[j]
	if !ok {
		var raw []byte
		for n := 0; len(raw) < logOutputSize; n++ {
			raw = fmt.Appendf(raw, `{"time":"2026-12-04T10:%02d:%02d.%06dZ","level":"info","msg":"GET /v1/orders?customer=4711&page=%d 200","path":"C:\\srv\\orders\\handler.go:%d","step":%d,"line":%d}`+"\n",
				n/60%60, n%60, 37*n%1000000, j, 100+n%50, j, n)
		}
		raw = raw[:logOutputSize]
		text = appendEscaped(nil, raw)
		logLines.steps[j] = text
	}
	logLines.Unlock()
	b = append(b, "run "...)
	b = append(b, run...)
	b = append(b, " step "...)
	b = strconv.AppendInt(b, int64(j), 10)
	b = append(b, `:\n`...)
	return append(b, text...)
}

// appendEscaped appends s as the body of a JSON string (s holds no control
// byte but '\n').
func appendEscaped(b, s []byte) []byte {
	for _, c := range s {
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return b
}

// buildBody returns a request of api for step of run, exactly size bytes
// long when the bare request is shorter than size. With toolOutput, its
// tool results are logOutput's.
func buildBody(api, run string, step, size int, stream, toolOutput bool) []byte {
	head, tail := bodyParts(api, run, step, stream, toolOutput)
	pad := max(size-len(head)-len(tail), 0)
	b := make([]byte, 0, len(head)+pad+len(tail))
	b = append(b, head...)
	for pad > len(padText) { // only for sizes beyond 200 KB
		b = append(b, padText...)
		pad -= len(padText)
	}
	b = append(b, padText[:pad]...)
	return append(b, tail...)
}

// bodyParts returns the request around its system prompt's padding.
func bodyParts(api, run string, step int, stream, toolOutput bool) (head, tail []byte) {
	result := func(b []byte, j int) []byte {
		if toolOutput {
			return logOutput(b, run, j)
		}
		return append(b, observation(j)...)
	}
	runB := []byte(run)
	if api == apiAnthropic {
		head = append(head, `{"model":"claude-haiku-4-5","max_tokens":512,"metadata":{"user_id":"`...)
		head = append(head, run...)
		head = append(head, `"},`...)
		if stream {
			head = append(head, `"stream":true,`...)
		}
		head = append(head, `"tools":`+anthropicTool+`,"system":"`...)
		tail = append(tail, `","messages":[{"role":"user","content":"`+userAsk+`"}`...)
		for j := 0; j < step; j++ {
			tail = append(tail, `,{"role":"assistant","content":[`...)
			tail = appendAnthropicToolUse(tail, runB, j)
			tail = append(tail, `]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_`...)
			tail = append(tail, run...)
			tail = append(tail, '_')
			tail = strconv.AppendInt(tail, int64(j), 10)
			tail = append(tail, `","content":"`...)
			tail = result(tail, j)
			tail = append(tail, `"}]}`...)
		}
		return head, append(tail, `]}`...)
	}
	head = append(head, `{"model":"gpt-4o-mini","user":"`...)
	head = append(head, run...)
	head = append(head, `","max_tokens":512,"temperature":0.2,`...)
	if stream {
		head = append(head, `"stream":true,`...)
	}
	head = append(head, `"tools":`+openAITools+`,"messages":[{"role":"system","content":"`...)
	tail = append(tail, `"},{"role":"user","content":"`+userAsk+`"}`...)
	for j := 0; j < step; j++ {
		tail = append(tail, `,{"role":"assistant","content":null,"tool_calls":[`...)
		tail = appendOpenAIToolCall(tail, runB, j)
		tail = append(tail, `]},{"role":"tool","tool_call_id":"call_`...)
		tail = append(tail, run...)
		tail = append(tail, '_')
		tail = strconv.AppendInt(tail, int64(j), 10)
		tail = append(tail, `","content":"`...)
		tail = result(tail, j)
		tail = append(tail, `"}`...)
	}
	return head, append(tail, `]}`...)
}
