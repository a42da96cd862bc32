package openai

import (
	"bytes"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/sse"
)

// NewStreamTap reads a Responses stream on the side. Nothing is injected
// into Responses requests, so nothing is dropped: chunks pass unchanged.
func (Responses) NewStreamTap(*wire.Request) wire.StreamTap { return &responsesTap{} }

type responsesTap struct {
	split    sse.Splitter
	resp     wire.Response
	text     []byte
	sawDelta bool
	done     bool // a terminal response.* event seen
	// tool is set once a function_call item or argument delta was read:
	// toolAt is that event's sequence number and toolIndex its output
	// index, where a final answer takes the call's place (Replace), and
	// final the terminal event's response object, kept from then on.
	tool      bool
	toolAt    int64
	toolIndex int64
	final     string
}

// Done reports that the stream's terminal event was read.
func (t *responsesTap) Done() bool { return t.done }

// Terminal reports whether ev ends the response, by its type as read
// reads it: the data's type member (OpenAI writes it first), else the
// event's name.
func (t *responsesTap) Terminal(ev []byte) bool {
	name, data := sse.Fields(ev)
	typ := gjson.Get(view(data), "type").Str
	if typ == "" {
		typ = view(name)
	}
	return responsesTerminal(typ)
}

// responsesTerminal reports whether an event type ends a Responses stream.
func responsesTerminal(typ string) bool {
	switch typ {
	case "response.completed", "response.incomplete", "response.failed", "response.cancelled":
		return true
	}
	return false
}

func (t *responsesTap) Feed(chunk []byte) []byte {
	t.split.Feed(chunk, t.read)
	return chunk
}

func (t *responsesTap) End() []byte {
	if p := t.split.Pending(); len(p) > 0 {
		t.read(p)
		t.split.Reset()
	}
	return nil
}

func (t *responsesTap) read(ev []byte) {
	name, data := sse.Fields(ev)
	d := view(bytes.TrimSpace(data))
	if len(d) == 0 || d[0] != '{' {
		return
	}
	var typ, response, item, delta, message, seq, index string
	eachMember(d, func(m member) bool {
		v := m.value(d)
		switch m.key {
		case "sequence_number":
			seq = v
		case "output_index":
			index = v
		case "type":
			typ = str(v)
		case "response":
			response = v
		case "item":
			item = v
		case "delta":
			delta = v
		case "message":
			message = v
		}
		return true
	})
	if typ == "" {
		typ = view(name)
	}
	if responsesTerminal(typ) {
		if t.tool {
			t.final = clone(response)
		}
		readResponseObject(&t.resp, response, &t.text, !t.sawDelta)
		t.done = true
		return
	}
	switch typ {
	case "response.output_text.delta":
		t.text = appendUnescaped(t.text, delta)
		t.sawDelta = true
	case "response.created", "response.in_progress", "response.queued":
		if t.resp.ID == "" {
			t.resp.ID = clone(str(field(response, "id")))
			t.resp.Model = clone(str(field(response, "model")))
		}
	case "response.output_item.added", "response.function_call_arguments.delta":
		if !t.tool && (typ != "response.output_item.added" || str(field(item, "type")) == "function_call") {
			t.tool = true
			t.toolAt, _ = num(seq)
			t.toolIndex, _ = num(index)
		}
	case "response.output_item.done":
		if str(field(item, "type")) == "function_call" {
			t.resp.ToolCalls = append(t.resp.ToolCalls, wire.ToolCall{
				ID:        clone(str(field(item, "call_id"))),
				Name:      clone(str(field(item, "name"))),
				Arguments: appendUnescaped(nil, field(item, "arguments")),
			})
		}
	case "error":
		t.resp.ErrorMessage = clone(str(message))
		t.resp.FinishReason = "error"
	}
}

func (t *responsesTap) Response() *wire.Response {
	t.resp.TextHash = wire.TextHash(view(t.text))
	t.resp.Text = head(t.text)
	return &t.resp
}

// ToolStarted reports that a function_call item or argument delta was read.
func (t *responsesTap) ToolStarted() bool { return t.tool }

// Replace keeps held's events that belong to no function_call item and
// do not end the response, then ends the stream with a message item of
// text in the first call's place and the upstream's terminal response
// (its usage kept) completed with that message instead of the calls.
func (t *responsesTap) Replace(held []byte, text string) []byte {
	out := make([]byte, 0, len(held)+2048+6*len(text)+len(t.final))
	keepEvents(held, &out, responsesToolOrEnd)
	seq := int(t.toolAt)
	msgID := "msg_haltline_" + randomHex(12)
	out = appendMessageEvents(out, &seq, msgID, int(t.toolIndex), text)
	msg := responsesMessage(nil, msgID, text, true)
	resp := t.final
	if !gjson.Valid(resp) || !isObject(resp) {
		resp = `{"id":` + string(appendString(nil, t.resp.ID)) + `,"object":"response","model":` +
			string(appendString(nil, t.resp.Model)) + `,"output":[],"usage":null}`
	}
	items := []byte{'['}
	for _, it := range gjson.Get(resp, "output").Array() {
		if it.Get("type").Str == "function_call" {
			continue
		}
		items = append(append(items, it.Raw...), ',')
	}
	items = append(append(items, msg...), ']')
	resp, _ = sjson.SetRaw(resp, "output", string(items))
	resp, _ = sjson.Set(resp, "status", "completed")
	return appendResponsesEvent(out, "response.completed", &seq, func(b []byte) []byte {
		return append(append(b, `,"response":`...), resp...)
	})
}

// responsesToolOrEnd reports whether an event has a part in a function
// call or ends the response.
func responsesToolOrEnd(ev []byte) bool {
	name, data := sse.Fields(ev)
	d := view(bytes.TrimSpace(data))
	typ := gjson.Get(d, "type").Str
	if typ == "" {
		typ = view(name)
	}
	switch typ {
	case "response.function_call_arguments.delta", "response.function_call_arguments.done":
		return true
	case "response.output_item.added", "response.output_item.done":
		return gjson.Get(d, "item.type").Str == "function_call"
	}
	return responsesTerminal(typ)
}
