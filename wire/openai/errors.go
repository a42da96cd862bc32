package openai

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
)

// errorTypes gives the OpenAI error "type" and "code" of each kind. Types
// follow OpenAI's own where one fits (the SDKs map the HTTP status, not the
// type, to their error classes). A 429 from the gateway is a budget or loop
// termination, not a transient limit: its type says budget_exceeded so that
// nobody mistakes it for OpenAI's own, while the code keeps OpenAI's
// rate_limit_exceeded for tools that only look at codes.
//
//	400 invalid_request_error / invalid_request
//	401 authentication_error  / invalid_api_key
//	403 permission_error      / policy_denied
//	404 not_found_error       / not_found
//	413 invalid_request_error / request_too_large
//	429 budget_exceeded       / rate_limit_exceeded
//	502 server_error          / bad_gateway
//	503 server_error          / service_unavailable
//	504 server_error          / timeout
func errorTypes(kind wire.ErrorKind) (typ, code string) {
	switch kind {
	case wire.ErrInvalidRequest:
		return "invalid_request_error", "invalid_request"
	case wire.ErrAuthentication:
		return "authentication_error", "invalid_api_key"
	case wire.ErrPolicyDenied:
		return "permission_error", "policy_denied"
	case wire.ErrNotFound:
		return "not_found_error", "not_found"
	case wire.ErrTooLarge:
		return "invalid_request_error", "request_too_large"
	case wire.ErrBudget:
		return "budget_exceeded", "rate_limit_exceeded"
	case wire.ErrBadGateway:
		return "server_error", "bad_gateway"
	case wire.ErrUnavailable:
		return "server_error", "service_unavailable"
	case wire.ErrTimeout:
		return "server_error", "timeout"
	}
	return "server_error", "internal_error"
}

// errorBody renders {"error":{…},"haltline":record}. A record that is not a
// JSON object is left out rather than break the body the client parses.
func errorBody(kind wire.ErrorKind, message string, record []byte) []byte {
	typ, code := errorTypes(kind)
	out := make([]byte, 0, 96+len(message)+len(record))
	out = append(out, `{"error":{"message":`...)
	out = appendString(out, message)
	out = append(out, `,"type":`...)
	out = appendString(out, typ)
	out = append(out, `,"param":null,"code":`...)
	out = appendString(out, code)
	out = append(out, '}')
	if rec := bytes.TrimSpace(record); len(rec) > 0 && rec[0] == '{' && gjson.ValidBytes(rec) {
		out = append(out, `,"haltline":`...)
		out = append(out, rec...)
	}
	return append(out, '}')
}

// ErrorBody renders an error in OpenAI's format (see errorTypes).
func (Chat) ErrorBody(kind wire.ErrorKind, message string, record []byte) []byte {
	return errorBody(kind, message, record)
}

// ErrorBody renders an error in OpenAI's format (see errorTypes).
func (Responses) ErrorBody(kind wire.ErrorKind, message string, record []byte) []byte {
	return errorBody(kind, message, record)
}
