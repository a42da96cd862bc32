package openai

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
	"github.com/haltline/haltline/wire/sse"
)

// NewStreamTap reads a chat completion stream. When the gateway injected
// include_usage (req.Stream and the client did not ask), the tap removes the
// usage-only chunk so the client receives the upstream's bytes minus exactly
// that event; otherwise every chunk passes unchanged.
func (Chat) NewStreamTap(req *wire.Request) wire.StreamTap {
	return &chatTap{strip: req != nil && req.Stream && !req.IncludeUsage}
}

type chatTap struct {
	split sse.Splitter
	strip bool
	resp  wire.Response
	text  []byte
	calls []streamCall
	// created and usage are the stream's created member and usage object
	// as sent, for a final answer in its place (Replace).
	created, usage string

	// Per-Feed state of the strip mode: the kept events form one run of
	// chunk, chunk[aStart:aEnd], returned without a copy, until an event
	// is dropped or held bytes complete an event; then out collects them.
	out     []byte
	cur     []byte
	pos     int
	joined  int
	aStart  int
	aEnd    int
	copying bool
	done    bool // [DONE] seen

	// repeated is how the stream's last chunk began, up to its first
	// member read at every chunk (choices, usage, error): OpenAI repeats
	// the same id, object, created, model and fingerprint in every chunk,
	// about half of its bytes, so a chunk beginning with the same bytes is
	// read from there (their id and model were taken from the first).
	repeated []byte
}

// Done reports that the stream's terminal event was read.
func (t *chatTap) Done() bool { return t.done }

// Terminal reports whether ev is the [DONE] event.
func (t *chatTap) Terminal(ev []byte) bool {
	_, data := sse.Fields(ev)
	return isDone(view(bytes.TrimSpace(data)))
}

// isDone reports whether an event's trimmed data is [DONE].
func isDone(data string) bool { return data == "[DONE]" }

// streamCall is one tool call being assembled from deltas.
type streamCall struct {
	index    int64
	id, name string
	args     []byte
}

func (t *chatTap) Feed(chunk []byte) []byte {
	if !t.strip {
		t.split.Feed(chunk, t.readOnly)
		return chunk
	}
	t.out = t.out[:0]
	t.cur, t.pos, t.joined = chunk, 0, len(t.split.Pending())
	t.aStart, t.aEnd, t.copying = -1, -1, false
	t.split.Feed(chunk, t.emit)
	t.cur = nil
	switch {
	case t.copying:
		return t.out
	case t.aStart < 0:
		return nil
	}
	return chunk[t.aStart:t.aEnd]
}

func (t *chatTap) readOnly(ev []byte) { t.read(ev) }

// emit decides for one complete event whether it passes, and where from.
func (t *chatTap) emit(ev []byte) {
	off := -1
	if t.joined > 0 {
		// The first event completes bytes held from earlier chunks: it
		// lies in the splitter's buffer and covers chunk up to pos.
		t.pos = max(len(ev)-t.joined, 0)
		t.joined = 0
	} else {
		off = t.pos
		t.pos += len(ev)
	}
	if t.read(ev) {
		return // the injected usage chunk
	}
	if !t.copying {
		if off >= 0 && (t.aStart < 0 || off == t.aEnd) {
			if t.aStart < 0 {
				t.aStart = off
			}
			t.aEnd = off + len(ev)
			return
		}
		t.copying = true
		if t.aStart >= 0 {
			t.out = append(t.out, t.cur[t.aStart:t.aEnd]...)
		}
	}
	t.out = append(t.out, ev...)
}

func (t *chatTap) End() []byte {
	p := t.split.Pending()
	if len(p) == 0 {
		return nil
	}
	drop := t.read(p)
	t.split.Reset()
	if !t.strip || drop {
		return nil // passed on already, or dropped
	}
	return p // still valid: the splitter's buffer is untouched until the next Feed
}

// read takes what one event says and reports whether the tap must drop it:
// strip mode and a well-formed usage-only chunk (choices [] and a usage
// object), the one the gateway asked for.
func (t *chatTap) read(ev []byte) bool {
	_, data := sse.Fields(ev)
	d := view(bytes.TrimSpace(data))
	if len(d) == 0 || d[0] != '{' {
		if isDone(d) {
			t.done = true
		}
		return false // [DONE], comments, or something we cannot read
	}
	var choices, usage string
	first := -1 // where the first member read at every chunk starts
	read := func(key string, start, v int) int {
		if key == "choices" && d[v] == '[' {
			// Read as it is walked: one pass finds the array's end and
			// reads each choice.
			if first < 0 {
				first = start
			}
			end := jsonscan.Array(d, v, func(e int) int { return t.readChoice(d, e) })
			if end >= 0 {
				choices = d[v:end]
			}
			return end
		}
		end := skipValue(d, v)
		if end < 0 {
			return -1
		}
		val := d[v:end]
		switch key {
		case "id":
			if t.resp.ID == "" {
				t.resp.ID = clone(str(val))
			}
			return end
		case "model":
			if t.resp.Model == "" {
				t.resp.Model = clone(str(val))
			}
			return end
		case "created":
			if t.created == "" {
				t.created = clone(val)
			}
			return end
		case "usage":
			usage = val
		case "error":
			if isObject(val) {
				t.resp.ErrorMessage = clone(str(field(val, "message")))
				t.resp.FinishReason = "error"
			}
		case "choices": // not an array: nothing to read
		default:
			return end
		}
		if first < 0 {
			first = start
		}
		return end
	}
	if n := len(t.repeated); n > 0 && len(d) > n && d[:n] == string(t.repeated) {
		jsonscan.Members(d, n, false, read)
	} else {
		jsonscan.Object(d, 0, false, read)
		if first > 0 {
			t.repeated = append(t.repeated[:0], d[:first]...)
		} else {
			t.repeated = t.repeated[:0]
		}
	}
	if isObject(usage) {
		t.resp.Usage, t.resp.HasUsage = usageFrom(usage)
		t.usage = clone(usage)
	}
	return t.strip && isObject(usage) && isEmptyArray(choices) && gjson.Valid(d)
}

// readChoice reads choice 0 of a chunk (n > 1 streams interleave choices;
// the gateway meters the first, as the SDKs' single-answer helpers do),
// the element at s[i], and returns the index past it.
func (t *chatTap) readChoice(s string, i int) int {
	if s[i] != '{' {
		return skipValue(s, i)
	}
	var index, delta, finish string
	end := walkObject(s, i, func(m member) bool {
		switch m.key {
		case "index":
			index = m.value(s)
		case "delta":
			delta = m.value(s)
		case "finish_reason":
			finish = m.value(s)
		}
		return true
	})
	if end < 0 {
		return -1
	}
	if n, ok := num(index); ok && n != 0 {
		return end
	}
	if fr := chatFinish(finish); fr != "" && t.resp.FinishReason != "error" {
		t.resp.FinishReason = fr
	}
	eachMember(delta, func(m member) bool {
		v := m.value(delta)
		switch m.key {
		case "content":
			t.text = appendUnescaped(t.text, v)
		case "tool_calls":
			eachElement(v, t.readToolDelta)
		case "function_call": // legacy: one call, no id
			t.readFunction(t.call(0, ""), v)
		}
		return true
	})
	return end
}

func (t *chatTap) readToolDelta(tc string) bool {
	var index, id, fn string
	eachMember(tc, func(m member) bool {
		switch m.key {
		case "index":
			index = m.value(tc)
		case "id":
			id = m.value(tc)
		case "function":
			fn = m.value(tc)
		}
		return true
	})
	n, ok := num(index)
	if !ok {
		// Some compatible servers omit index: a new id opens a call.
		n = int64(len(t.calls))
		if str(id) == "" && n > 0 {
			n--
		}
	}
	t.readFunction(t.call(n, id), fn)
	return true
}

func (t *chatTap) call(index int64, rawID string) *streamCall {
	var c *streamCall
	for i := range t.calls {
		if t.calls[i].index == index {
			c = &t.calls[i]
			break
		}
	}
	if c == nil {
		t.calls = append(t.calls, streamCall{index: index})
		c = &t.calls[len(t.calls)-1]
	}
	if c.id == "" && isString(rawID) {
		c.id = clone(str(rawID))
	}
	return c
}

func (t *chatTap) readFunction(c *streamCall, fn string) {
	eachMember(fn, func(m member) bool {
		v := m.value(fn)
		switch m.key {
		case "name":
			// OpenAI sends the name once, whole; keep the first.
			if c.name == "" {
				c.name = clone(str(v))
			}
		case "arguments":
			c.args = appendUnescaped(c.args, v)
		}
		return true
	})
}

func (t *chatTap) Response() *wire.Response {
	r := &t.resp
	r.TextHash = wire.TextHash(view(t.text))
	r.Text = head(t.text)
	r.ToolCalls = r.ToolCalls[:0]
	calls := slices.Clone(t.calls)
	slices.SortStableFunc(calls, func(a, b streamCall) int { return cmp.Compare(a.index, b.index) })
	for _, c := range calls {
		r.ToolCalls = append(r.ToolCalls, wire.ToolCall{ID: c.id, Name: c.name, Arguments: c.args})
	}
	return r
}

// ToolStarted reports that a tool call's first delta was read.
func (t *chatTap) ToolStarted() bool { return len(t.calls) > 0 }

// Replace keeps held's chunks that carry neither a tool call, a finish
// reason, the usage nor [DONE], then ends the stream with text: a content
// chunk, a stop chunk, the usage chunk when the client asked for it (the
// upstream's usage), and [DONE]. The chunks keep the stream's id, created
// and model, which an accumulating client checks.
func (t *chatTap) Replace(held []byte, text string) []byte {
	out := make([]byte, 0, len(held)+512+len(text)+len(t.usage))
	keepEvents(held, &out, chatToolOrEnd)
	created := t.created
	if created == "" {
		created = strconv.FormatInt(time.Now().Unix(), 10)
	}
	chunk := func(choices string) {
		out = append(out, `data: {"id":`...)
		out = appendString(out, t.resp.ID)
		out = append(out, `,"object":"chat.completion.chunk","created":`...)
		out = append(out, created...)
		out = append(out, `,"model":`...)
		out = appendString(out, t.resp.Model)
		out = append(out, `,"choices":`...)
		out = append(out, choices...)
		out = append(out, "}\n\n"...)
	}
	delta := appendString([]byte(`[{"index":0,"delta":{"role":"assistant","content":`), text)
	chunk(string(append(delta, `},"logprobs":null,"finish_reason":null}]`...)))
	chunk(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]`)
	if !t.strip {
		usage := t.usage
		if usage == "" {
			usage = zeroChatUsage
		}
		chunk(`[],"usage":` + usage)
	}
	return append(out, "data: [DONE]\n\n"...)
}

// chatToolOrEnd reports whether a chunk has a part in a tool call or in
// the stream's end: tool_calls or function_call deltas, a finish reason,
// a usage-only chunk, [DONE]. Anything else (text, role, comments, bytes
// it cannot read) is not.
func chatToolOrEnd(ev []byte) bool {
	_, data := sse.Fields(ev)
	d := view(bytes.TrimSpace(data))
	if isDone(d) {
		return true
	}
	if len(d) == 0 || d[0] != '{' {
		return false
	}
	choices := gjson.Get(d, "choices")
	if choices.IsArray() && len(choices.Array()) == 0 && gjson.Get(d, "usage").IsObject() {
		return true
	}
	c := choices.Get("0")
	fr := c.Get("finish_reason")
	return c.Get("delta.tool_calls").Exists() || c.Get("delta.function_call").Exists() ||
		(fr.Exists() && fr.Type != gjson.Null)
}

// keepEvents appends to out the events of held for which drop is false;
// bytes after held's last whole event are kept as they are.
func keepEvents(held []byte, out *[]byte, drop func(ev []byte) bool) {
	var split sse.Splitter
	split.Feed(held, func(ev []byte) {
		if !drop(ev) {
			*out = append(*out, ev...)
		}
	})
	if p := split.Pending(); len(p) > 0 && !drop(p) {
		*out = append(*out, p...)
	}
}

const zeroChatUsage = `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,` +
	`"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`
