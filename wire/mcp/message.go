package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/haltline/haltline/wire/sse"
)

// JSON-RPC and MCP error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeServerError is the generic implementation-defined server error
	// the reference servers use for transport problems.
	CodeServerError = -32000
	// CodeToolTimeout and CodeBadGateway are the gateway's own: the tool
	// did not answer in time, or answered something unreadable.
	CodeToolTimeout = -32001
	CodeBadGateway  = -32002
)

// Methods the gateway looks at; every other method passes unchanged.
const (
	MethodToolsCall = "tools/call"
	MethodToolsList = "tools/list"
)

// Message is one JSON-RPC 2.0 message: a request, a notification (no id),
// or a response (result or error). Raw fields alias the parsed body.
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

// IsRequest reports whether the message expects a response.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) > 0 && !isNull(m.ID) }

// IsResponse reports whether the message answers a request.
func (m *Message) IsResponse() bool { return m.Method == "" && (m.Result != nil || m.Error != nil) }

func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// ParseError is a request the gateway cannot read; Code says which
// JSON-RPC error answers it.
type ParseError struct {
	Code int
	Msg  string
}

func (e *ParseError) Error() string { return e.Msg }

// maxIDLen bounds a request id: ids are echoed back and logged by hash.
const maxIDLen = 256

// ParseRequest reads one JSON-RPC message sent by a client. Batches were
// removed from the protocol in 2025-06-18 and are refused.
func ParseRequest(body []byte) (Message, error) {
	var m Message
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return m, &ParseError{CodeParseError, "empty body"}
	}
	if b[0] == '[' {
		return m, &ParseError{CodeInvalidRequest, "JSON-RPC batches are not supported by MCP 2025-11-25"}
	}
	if b[0] != '{' || !json.Valid(b) {
		return m, &ParseError{CodeParseError, "body is not a JSON object"}
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, &ParseError{CodeInvalidRequest, "not a JSON-RPC message: " + shortErr(err)}
	}
	if m.JSONRPC != "2.0" {
		return m, &ParseError{CodeInvalidRequest, `jsonrpc must be "2.0"`}
	}
	if len(m.ID) > maxIDLen {
		return m, &ParseError{CodeInvalidRequest, "id too long"}
	}
	if len(m.ID) > 0 && !validID(m.ID) {
		return m, &ParseError{CodeInvalidRequest, "id must be a string or a number"}
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return m, &ParseError{CodeInvalidRequest, "message has no method, result or error"}
	}
	return m, nil
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case 'n':
		return isNull(id)
	}
	_, err := strconv.ParseFloat(string(id), 64)
	return err == nil
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// CallParams are the parameters of tools/call.
type CallParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ParseCall reads tools/call parameters; arguments default to {}.
func ParseCall(params json.RawMessage) (CallParams, error) {
	var p CallParams
	if len(params) == 0 || isNull(params) {
		return p, &ParseError{CodeInvalidParams, "tools/call needs params"}
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return p, &ParseError{CodeInvalidParams, "tools/call params: " + shortErr(err)}
	}
	if p.Name == "" {
		return p, &ParseError{CodeInvalidParams, "tools/call params lack a tool name"}
	}
	if len(p.Arguments) == 0 || isNull(p.Arguments) {
		p.Arguments = json.RawMessage("{}")
	}
	if a := bytes.TrimSpace(p.Arguments); len(a) == 0 || a[0] != '{' {
		return p, &ParseError{CodeInvalidParams, "tools/call arguments must be an object"}
	}
	return p, nil
}

// ErrNoResponse means a response body held no answer to the request.
var ErrNoResponse = errors.New("mcp: no response to the request in the body")

// ResponseBody is a server's answer to one POST: the messages in order
// (an SSE body may carry notifications and server requests before the
// response) and which of them is the response.
type ResponseBody struct {
	SSE      bool
	Messages []Message
	// Raw holds each message's JSON as received.
	Raw [][]byte
	// Index is the position of the response to the request, or -1.
	Index int
	// Extra is the SSE event's other fields (id:, event:) per message, kept
	// so a re-framed stream stays resumable.
	EventIDs []string
}

// ParseResponse reads a server's answer to a request with the given id.
// sseBody selects SSE parsing (Content-Type text/event-stream).
func ParseResponse(body []byte, sseBody bool, id json.RawMessage) (ResponseBody, error) {
	rb := ResponseBody{SSE: sseBody, Index: -1}
	add := func(raw []byte, evID string) error {
		var m Message
		if err := json.Unmarshal(raw, &m); err != nil || m.JSONRPC != "2.0" {
			return fmt.Errorf("mcp: server sent a message that is not JSON-RPC")
		}
		if m.IsResponse() && rb.Index < 0 && sameID(m.ID, id) {
			rb.Index = len(rb.Messages)
		}
		rb.Messages = append(rb.Messages, m)
		rb.Raw = append(rb.Raw, raw)
		rb.EventIDs = append(rb.EventIDs, evID)
		return nil
	}
	if !sseBody {
		b := bytes.TrimSpace(body)
		if len(b) == 0 || b[0] != '{' {
			return rb, fmt.Errorf("mcp: server answer is not a JSON object")
		}
		if err := add(b, ""); err != nil {
			return rb, err
		}
	} else {
		var sp sse.Splitter
		var err error
		fn := func(ev []byte) {
			if err != nil {
				return
			}
			_, data := sse.Fields(ev)
			data = bytes.TrimSpace(data)
			if len(data) == 0 {
				return // priming event or keep-alive
			}
			err = add(bytes.Clone(data), eventID(ev))
		}
		sp.Feed(body, fn)
		if rest := sp.Pending(); len(bytes.TrimSpace(rest)) > 0 {
			fn(append(bytes.Clone(rest), '\n', '\n'))
		}
		if err != nil {
			return rb, err
		}
	}
	if rb.Index < 0 {
		return rb, ErrNoResponse
	}
	return rb, nil
}

// eventID returns the id: field of an SSE event.
func eventID(ev []byte) string {
	for _, line := range bytes.Split(ev, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if v, ok := bytes.CutPrefix(line, []byte("id:")); ok {
			return string(bytes.TrimPrefix(v, []byte(" ")))
		}
	}
	return ""
}

func sameID(a, b json.RawMessage) bool {
	return string(bytes.TrimSpace(a)) == string(bytes.TrimSpace(b))
}

// Encode renders the body again, with the response replaced by resp (a
// whole JSON-RPC message): JSON as the message alone, SSE as one event per
// message in the original order.
func (rb *ResponseBody) Encode(resp []byte) []byte {
	if !rb.SSE {
		return resp
	}
	var out []byte
	for i, raw := range rb.Raw {
		if i == rb.Index {
			raw = resp
		}
		out = AppendEvent(out, rb.EventIDs[i], raw)
	}
	return out
}

// AppendEvent frames one message as an SSE "message" event.
func AppendEvent(dst []byte, id string, msg []byte) []byte {
	dst = append(dst, "event: message\n"...)
	if id != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, id...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = append(dst, msg...)
	return append(dst, "\n\n"...)
}

// idOrNull is the id to echo: null when the request had none readable.
func idOrNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

// ResultMessage builds {"jsonrpc":"2.0","id":id,"result":result}.
func ResultMessage(id json.RawMessage, result []byte) []byte {
	b := make([]byte, 0, len(result)+len(id)+36)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, idOrNull(id)...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// ErrorMessage builds a JSON-RPC error response; data may be nil.
func ErrorMessage(id json.RawMessage, code int, msg string, data any) []byte {
	e := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    any    `json:"data,omitempty"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: idOrNull(id)}
	e.Error.Code, e.Error.Message, e.Error.Data = code, msg, data
	b, _ := json.Marshal(e)
	return b
}

// Content is one block of a tool result.
type Content struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// ToolResult is a tools/call result as the gateway builds or reads it.
// Other content kinds (image, audio, resource) are kept raw.
type ToolResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
	IsError           bool              `json:"isError,omitempty"`
	Meta              json.RawMessage   `json:"_meta,omitempty"`
}

// TextResult builds a result with one text block; structured, when not
// nil, becomes structuredContent (the machine-readable part: a ticket, a
// schema).
func TextResult(text string, isError bool, structured any) []byte {
	blk, _ := json.Marshal(Content{Type: "text", Text: text})
	r := ToolResult{Content: []json.RawMessage{blk}, IsError: isError}
	if structured != nil {
		r.StructuredContent, _ = json.Marshal(structured)
	}
	b, _ := json.Marshal(r)
	return b
}

// ParseToolResult reads a tools/call result.
func ParseToolResult(result json.RawMessage) (ToolResult, error) {
	var r ToolResult
	if err := json.Unmarshal(result, &r); err != nil {
		return r, fmt.Errorf("mcp: tool result: %s", shortErr(err))
	}
	return r, nil
}

// Text joins the text blocks of a result: the output that is metered,
// fingerprinted and cut.
func (r *ToolResult) Text() string {
	var b []byte
	for _, c := range r.Content {
		var blk Content
		if json.Unmarshal(c, &blk) == nil && blk.Type == "text" {
			if len(b) > 0 {
				b = append(b, '\n')
			}
			b = append(b, blk.Text...)
		}
	}
	return string(b)
}

// ReplaceText returns the result with its text blocks replaced by one block
// holding text (placed where the first one was); other blocks stay.
// structuredContent is dropped: it repeats the text that was cut.
func (r *ToolResult) ReplaceText(text string) []byte {
	blk, _ := json.Marshal(Content{Type: "text", Text: text})
	out := ToolResult{IsError: r.IsError, Meta: r.Meta}
	placed := false
	for _, c := range r.Content {
		var k Content
		if json.Unmarshal(c, &k) == nil && k.Type == "text" {
			if !placed {
				out.Content = append(out.Content, blk)
				placed = true
			}
			continue
		}
		out.Content = append(out.Content, c)
	}
	if !placed {
		out.Content = append(out.Content, blk)
	}
	b, _ := json.Marshal(out)
	return b
}
