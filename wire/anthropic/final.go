package anthropic

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
)

// Content types of SyntheticFinal.
const (
	ContentTypeJSON = "application/json"
	ContentTypeSSE  = "text/event-stream"
)

// SyntheticFinal renders the gateway's own final answer: one text block,
// stop_reason end_turn, zero usage, id msg_haltline_<hex>. When req.Stream it
// is the whole event sequence an SDK accumulates into the same message.
// Empty text gives an empty content array, because Anthropic rejects an
// empty text block when the client echoes the message back.
func (Messages) SyntheticFinal(req *wire.Request, text string) (string, []byte) {
	var model string
	stream := false
	if req != nil {
		model, stream = req.Model, req.Stream
	}
	id := messageID()
	if !stream {
		b := make([]byte, 0, 256+len(text))
		b = append(b, `{"id":`...)
		b = appendJSONString(b, id)
		b = append(b, `,"type":"message","role":"assistant","model":`...)
		b = appendJSONString(b, model)
		b = append(b, `,"content":[`...)
		if text != "" {
			b = append(b, `{"type":"text","text":`...)
			b = appendJSONString(b, text)
			b = append(b, '}')
		}
		b = append(b, `],"stop_reason":"end_turn","stop_sequence":null,"usage":`...)
		b = append(b, zeroUsage...)
		b = append(b, '}')
		return ContentTypeJSON, b
	}

	b := make([]byte, 0, 1024+len(text))
	b = append(b, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	b = appendJSONString(b, id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	b = append(b, zeroUsage...)
	b = append(b, "}}\n\n"...)
	if text != "" {
		b = append(b, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
		b = append(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"...)
		b = appendJSONString(b, text)
		b = append(b, "}}\n\n"...)
		b = append(b, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
	}
	b = append(b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":"...)
	b = append(b, zeroUsage...)
	b = append(b, "}\n\n"...)
	b = append(b, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
	return ContentTypeSSE, b
}

const zeroUsage = `{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}`

// messageID returns msg_haltline_ and 24 random hex digits: the shape of an
// Anthropic id, plainly marked as the gateway's.
func messageID() string {
	var r [12]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "msg_haltline_" + hex.EncodeToString(r[:])
}

// ErrorType is the Anthropic error type that renders kind. Anthropic's
// documented types (docs.claude.com/en/api/errors) cover 400–429 one to one.
// For the gateway's own 5xx: 502 (upstream unreachable) is api_error, the
// generic internal error; 503 (store or policy engine unavailable) is
// overloaded_error, Anthropic's "temporarily unavailable, retry later"; 504
// (upstream timeout or run deadline) is timeout_error, which the official
// SDKs know. The HTTP status is always kind.Status(), not Anthropic's 529.
func ErrorType(kind wire.ErrorKind) string {
	switch kind {
	case wire.ErrInvalidRequest:
		return "invalid_request_error"
	case wire.ErrAuthentication:
		return "authentication_error"
	case wire.ErrPolicyDenied:
		return "permission_error"
	case wire.ErrNotFound:
		return "not_found_error"
	case wire.ErrTooLarge:
		return "request_too_large"
	case wire.ErrBudget:
		return "rate_limit_error"
	case wire.ErrUnavailable:
		return "overloaded_error"
	case wire.ErrTimeout:
		return "timeout_error"
	}
	return "api_error"
}

// ErrorBody renders {"type":"error","error":{"type":…,"message":…}} and,
// when record is not nil, "haltline": record. A record that is not valid
// JSON is embedded as a JSON string so the body always parses.
func (Messages) ErrorBody(kind wire.ErrorKind, message string, record []byte) []byte {
	b := make([]byte, 0, 64+len(message)+len(record))
	b = append(b, `{"type":"error","error":{"type":"`...)
	b = append(b, ErrorType(kind)...)
	b = append(b, `","message":`...)
	b = appendJSONString(b, message)
	b = append(b, '}')
	if record != nil {
		b = append(b, `,"haltline":`...)
		if gjson.ValidBytes(record) {
			b = append(b, record...)
		} else {
			b = appendJSONString(b, string(record))
		}
	}
	return append(b, '}')
}
