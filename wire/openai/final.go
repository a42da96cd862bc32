package openai

import (
	"strconv"
	"time"

	"github.com/haltline/haltline/wire"
)

const (
	contentJSON = "application/json"
	contentSSE  = "text/event-stream"
)

// SyntheticFinal renders the gateway's own final answer: finish_reason stop,
// zero usage, id chatcmpl-haltline-<hex>. A stream sends the role, the text,
// the finish, the usage chunk only if the client asked for it, then [DONE].
func (Chat) SyntheticFinal(req *wire.Request, text string) (string, []byte) {
	var model string
	var stream, usage bool
	if req != nil {
		model, stream, usage = req.Model, req.Stream, req.IncludeUsage
	}
	id := "chatcmpl-haltline-" + randomHex(12)
	created := strconv.AppendInt(nil, time.Now().Unix(), 10)
	head := func(b []byte, object string) []byte {
		b = append(b, `{"id":`...)
		b = appendString(b, id)
		b = append(b, `,"object":"`...)
		b = append(b, object...)
		b = append(b, `","created":`...)
		b = append(b, created...)
		b = append(b, `,"model":`...)
		return appendString(b, model)
	}
	const zero = zeroChatUsage
	if !stream {
		b := head(make([]byte, 0, 320+len(text)+len(model)), "chat.completion")
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = appendString(b, text)
		b = append(b, `,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":`...)
		b = append(b, zero...)
		return contentJSON, append(b, '}')
	}
	b := make([]byte, 0, 1024+len(text)+4*len(model))
	chunk := func(delta []byte, finish string) {
		b = append(b, "data: "...)
		b = head(b, "chat.completion.chunk")
		b = append(b, `,"choices":[{"index":0,"delta":`...)
		b = append(b, delta...)
		b = append(b, `,"logprobs":null,"finish_reason":`...)
		b = append(b, finish...)
		b = append(b, "}]"...)
		if usage {
			b = append(b, `,"usage":null`...)
		}
		b = append(b, "}\n\n"...)
	}
	chunk([]byte(`{"role":"assistant","content":""}`), "null")
	chunk(append(appendString([]byte(`{"content":`), text), '}'), "null")
	chunk([]byte(`{}`), `"stop"`)
	if usage {
		b = append(b, "data: "...)
		b = head(b, "chat.completion.chunk")
		b = append(b, `,"choices":[],"usage":`...)
		b = append(b, zero...)
		b = append(b, "}\n\n"...)
	}
	b = append(b, "data: [DONE]\n\n"...)
	return contentSSE, b
}

// SyntheticFinal renders the gateway's own final answer as a completed
// response (id resp_haltline_<hex>, zero usage). A stream sends the whole
// event sequence an SDK accumulates, with sequence numbers.
func (Responses) SyntheticFinal(req *wire.Request, text string) (string, []byte) {
	var model string
	var stream bool
	if req != nil {
		model, stream = req.Model, req.Stream
	}
	id := "resp_haltline_" + randomHex(12)
	msgID := "msg_haltline_" + randomHex(12)
	created := strconv.AppendInt(nil, time.Now().Unix(), 10)

	response := func(b []byte, done bool) []byte {
		b = append(b, `{"id":`...)
		b = appendString(b, id)
		b = append(b, `,"object":"response","created_at":`...)
		b = append(b, created...)
		if done {
			b = append(b, `,"status":"completed","completed_at":`...)
			b = append(b, created...)
		} else {
			b = append(b, `,"status":"in_progress"`...)
		}
		b = append(b, `,"error":null,"incomplete_details":null,"instructions":null,"model":`...)
		b = appendString(b, model)
		b = append(b, `,"output":[`...)
		if done {
			b = responsesMessage(b, msgID, text, true)
		}
		b = append(b, `],"parallel_tool_calls":false,"tool_choice":"auto","tools":[]`...)
		if done {
			b = append(b, `,"usage":{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},`+
				`"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0}`...)
		} else {
			b = append(b, `,"usage":null`...)
		}
		return append(b, '}')
	}
	if !stream {
		return contentJSON, response(make([]byte, 0, 640+2*len(text)+len(model)), true)
	}

	b := make([]byte, 0, 4096+6*len(text)+3*len(model))
	seq := 0
	event := func(name string, fill func(b []byte) []byte) {
		b = appendResponsesEvent(b, name, &seq, fill)
	}
	event("response.created", func(b []byte) []byte {
		return response(append(b, `,"response":`...), false)
	})
	event("response.in_progress", func(b []byte) []byte {
		return response(append(b, `,"response":`...), false)
	})
	b = appendMessageEvents(b, &seq, msgID, 0, text)
	event("response.completed", func(b []byte) []byte {
		return response(append(b, `,"response":`...), true)
	})
	return contentSSE, b
}

// appendResponsesEvent appends one Responses stream event: its name, and
// data of that type with the next sequence number, then what fill adds.
func appendResponsesEvent(b []byte, name string, seq *int, fill func(b []byte) []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, name...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(*seq), 10)
	*seq++
	b = fill(b)
	return append(b, "}\n\n"...)
}

// appendMessageEvents appends the events of one assistant message item of
// text at output index, from output_item.added to output_item.done, as an
// SDK accumulates them.
func appendMessageEvents(b []byte, seq *int, msgID string, index int, text string) []byte {
	at := strconv.Itoa(index)
	itemRef := func(b []byte) []byte {
		b = append(b, `,"item_id":`...)
		b = appendString(b, msgID)
		return append(b, `,"output_index":`+at+`,"content_index":0`...)
	}
	item := func(b []byte, done bool) []byte {
		return responsesMessage(append(b, `,"output_index":`+at+`,"item":`...), msgID, text, done)
	}
	b = appendResponsesEvent(b, "response.output_item.added", seq, func(b []byte) []byte { return item(b, false) })
	b = appendResponsesEvent(b, "response.content_part.added", seq, func(b []byte) []byte {
		return responsesPart(append(itemRef(b), `,"part":`...), "")
	})
	b = appendResponsesEvent(b, "response.output_text.delta", seq, func(b []byte) []byte {
		return appendString(append(itemRef(b), `,"logprobs":[],"delta":`...), text)
	})
	b = appendResponsesEvent(b, "response.output_text.done", seq, func(b []byte) []byte {
		return appendString(append(itemRef(b), `,"logprobs":[],"text":`...), text)
	})
	b = appendResponsesEvent(b, "response.content_part.done", seq, func(b []byte) []byte {
		return responsesPart(append(itemRef(b), `,"part":`...), text)
	})
	return appendResponsesEvent(b, "response.output_item.done", seq, func(b []byte) []byte { return item(b, true) })
}

// responsesMessage appends an assistant message item: in progress and
// empty, or completed with text.
func responsesMessage(b []byte, msgID, text string, done bool) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, msgID)
	if !done {
		return append(b, `,"type":"message","status":"in_progress","role":"assistant","content":[]}`...)
	}
	b = append(b, `,"type":"message","status":"completed","role":"assistant","content":[`...)
	b = responsesPart(b, text)
	return append(b, "]}"...)
}

// responsesPart appends an output_text part of text.
func responsesPart(b []byte, text string) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = appendString(b, text)
	return append(b, `,"annotations":[],"logprobs":[]}`...)
}
