package anthropic

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/sse"
)

// NewStreamTap reads a Messages SSE stream on the side. Nothing is held
// back or changed in an Anthropic stream, so Feed returns its input; when
// the run ends on a tool call, Replace writes the final answer in its place.
func (Messages) NewStreamTap(*wire.Request) wire.StreamTap {
	t := &tap{}
	t.onEvent = t.event // bound once: a method value per Feed would allocate
	return t
}

// tap assembles a wire.Response from stream events. Text and tool arguments
// are unescaped straight into growing buffers, so a delta costs no
// allocation once the buffers have grown.
type tap struct {
	split   sse.Splitter
	onEvent func([]byte)
	resp    wire.Response
	u       usage
	text    []byte  // all text deltas, for the hash and the head
	hashed  int     // len(text) when Text and TextHash were last computed
	blocks  []int64 // content block index of each resp.ToolCalls entry
	// deltaUsage is the last message_delta's usage object as sent, for a
	// final answer in the stream's place (Replace).
	deltaUsage string
	errored    bool
	done       bool // message_stop (or an error event) read
}

// Feed reads chunk on the side and returns it unchanged.
func (t *tap) Feed(chunk []byte) []byte {
	t.split.Feed(chunk, t.onEvent)
	return chunk
}

// End reads an event left unterminated at the end of the stream; there are
// never bytes to return, since Feed held none back.
func (t *tap) End() []byte {
	if p := t.split.Pending(); len(p) > 0 {
		t.event(p)
		t.split.Reset()
	}
	return nil
}

// Done reports that the stream's terminal event was read: message_stop, or
// an error event, after which Anthropic sends nothing more. It stays true.
func (t *tap) Done() bool { return t.done }

// Response is what the stream said so far; tool calls are complete once
// their content_block_stop (or the end of the stream) has been read.
func (t *tap) Response() *wire.Response {
	if len(t.text) != t.hashed {
		t.resp.TextHash = wire.TextHash(view(t.text))
		t.resp.Text = head(t.text, wire.TextKeep)
		t.hashed = len(t.text)
	}
	return &t.resp
}

// Terminal reports whether ev is message_stop or an error event.
func (t *tap) Terminal(ev []byte) bool {
	typ, _ := eventType(ev)
	return typ == "message_stop" || typ == "error"
}

// eventType returns an event's type (its name, or its data's type member)
// and its data.
func eventType(ev []byte) (typ, data string) {
	name, d := sse.Fields(ev)
	data, typ = view(d), view(name)
	if typ == "" {
		typ = gjson.Get(data, "type").Str
	}
	return typ, data
}

func (t *tap) event(ev []byte) {
	typ, d := eventType(ev)
	switch typ {
	case "content_block_delta":
		delta := gjson.Get(d, "delta")
		switch gjson.Get(delta.Raw, "type").Str {
		case "text_delta":
			t.text = appendUnescaped(t.text, strBody(rawMember(delta.Raw, "text")))
		case "input_json_delta":
			if i := t.tool(gjson.Get(d, "index").Int()); i >= 0 {
				tc := &t.resp.ToolCalls[i]
				tc.Arguments = appendUnescaped(tc.Arguments, strBody(rawMember(delta.Raw, "partial_json")))
			}
		}
	case "content_block_start":
		cb := gjson.Get(d, "content_block")
		switch cb.Get("type").Str {
		case "text":
			t.text = appendUnescaped(t.text, strBody(rawMember(cb.Raw, "text")))
		case "tool_use":
			t.resp.ToolCalls = append(t.resp.ToolCalls, wire.ToolCall{
				ID:   strings.Clone(cb.Get("id").Str),
				Name: strings.Clone(cb.Get("name").Str),
			})
			t.blocks = append(t.blocks, gjson.Get(d, "index").Int())
		}
	case "content_block_stop":
		// A tool that streamed no argument text takes no arguments.
		if i := t.tool(gjson.Get(d, "index").Int()); i >= 0 && len(t.resp.ToolCalls[i].Arguments) == 0 {
			t.resp.ToolCalls[i].Arguments = []byte("{}")
		}
	case "message_start":
		m := gjson.Get(d, "message")
		t.resp.ID = strings.Clone(m.Get("id").Str)
		t.resp.Model = strings.Clone(m.Get("model").Str)
		t.readUsage(m.Get("usage"))
	case "message_stop":
		t.done = true
	case "message_delta":
		if sr := gjson.Get(d, "delta.stop_reason"); sr.Type == gjson.String && !t.errored {
			t.resp.FinishReason = finishReason(sr.Str)
		}
		u := gjson.Get(d, "usage")
		if u.IsObject() {
			t.deltaUsage = strings.Clone(u.Raw)
		}
		t.readUsage(u)
	case "error":
		e := gjson.Get(d, "error")
		msg := e.Get("message").Str
		if msg == "" {
			msg = e.Get("type").Str
		}
		if msg == "" {
			msg = "stream error"
		}
		t.resp.ErrorMessage = strings.Clone(msg)
		t.resp.FinishReason = "error"
		t.errored = true
		t.done = true
	}
}

func (t *tap) readUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	t.u.read(u.Raw)
	t.resp.Usage, t.resp.HasUsage = t.u.norm(), true
}

// tool returns the ToolCalls position of content block index, or -1.
func (t *tap) tool(index int64) int {
	for i := len(t.blocks) - 1; i >= 0; i-- {
		if t.blocks[i] == index {
			return i
		}
	}
	return -1
}

// ToolStarted reports that a tool_use block has begun.
func (t *tap) ToolStarted() bool { return len(t.blocks) > 0 }

// Replace keeps held's events but those of tool_use blocks and the
// message's end (message_delta, message_stop), then ends the message with
// a text block of text in the first tool block's place, stop_reason
// end_turn and the upstream's output usage.
func (t *tap) Replace(held []byte, text string) []byte {
	out := make([]byte, 0, len(held)+512+len(text))
	var split sse.Splitter
	keep := func(ev []byte) {
		typ, d := eventType(ev)
		switch typ {
		case "message_delta", "message_stop":
			return
		case "content_block_start", "content_block_delta", "content_block_stop":
			if t.tool(gjson.Get(d, "index").Int()) >= 0 {
				return
			}
		}
		out = append(out, ev...)
	}
	split.Feed(held, keep)
	if p := split.Pending(); len(p) > 0 {
		keep(p)
	}
	var index int64
	if len(t.blocks) > 0 {
		index = t.blocks[0]
	}
	at := strconv.FormatInt(index, 10)
	out = append(out, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"+at+
		",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
	out = append(out, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"+at+
		",\"delta\":{\"type\":\"text_delta\",\"text\":"...)
	out = appendJSONString(out, text)
	out = append(out, "}}\n\n"...)
	out = append(out, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"+at+"}\n\n"...)
	usage := t.deltaUsage
	if usage == "" {
		usage = `{"output_tokens":0}`
	}
	out = append(out, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":"...)
	out = append(out, usage...)
	out = append(out, "}\n\n"...)
	return append(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}
