package openai

import (
	"bytes"

	"github.com/tidwall/gjson"

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
	var typ, response, item, delta, message string
	eachMember(d, func(m member) bool {
		v := m.value(d)
		switch m.key {
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
