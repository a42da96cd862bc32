package openai

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/haltline/haltline/wire"
)

// usageFrom reads an OpenAI usage object in either API's naming into the
// normalised wire.Usage (docs/design.md §12): the prompt count already includes cached
// tokens, and reasoning tokens are part of the output count, so the detail
// counts are copied, never added.
func usageFrom(raw string) (wire.Usage, bool) {
	if !isObject(raw) {
		return wire.Usage{}, false
	}
	var u wire.Usage
	eachMember(raw, func(m member) bool {
		v := m.value(raw)
		switch m.key {
		case "prompt_tokens", "input_tokens":
			u.InputTokens, _ = num(v)
		case "completion_tokens", "output_tokens":
			u.OutputTokens, _ = num(v)
		case "prompt_tokens_details", "input_tokens_details":
			if n, ok := num(field(v, "cached_tokens")); ok {
				u.CachedTokens = n
			}
			if n, ok := num(field(v, "cache_write_tokens")); ok {
				u.CacheWriteTokens = n
			}
		case "completion_tokens_details", "output_tokens_details":
			if n, ok := num(field(v, "reasoning_tokens")); ok {
				u.ReasoningTokens = n
			}
		}
		return true
	})
	return u, true
}

// chatFinish normalises a Chat Completions finish_reason. Values outside the
// documented set (OpenAI-compatible servers invent some) map to the nearest
// meaning; anything unknown counts as "stop", the answer having ended.
func chatFinish(raw string) string {
	switch s := str(raw); s {
	case "":
		return ""
	case "stop", "end_turn", "stop_sequence", "eos":
		return "stop"
	case "tool_calls", "function_call", "tool_use":
		return "tool_calls"
	case "length", "max_tokens":
		return "length"
	case "content_filter":
		return "content_filter"
	case "error":
		return "error"
	default:
		return "stop"
	}
}

// head returns the first wire.TextKeep bytes of text, cut on a rune boundary,
// as a string of its own (the text buffer is reused or aliases a body).
func head(text []byte) string {
	if len(text) > wire.TextKeep {
		n := wire.TextKeep
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
	}
	return string(text)
}

// randomHex returns n random bytes in hex, for synthetic ids.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b)
}

// appendParts appends the text of a content value: a string, or an array of
// parts whose "text" is taken when their type is one of types. It reports
// whether the value was a string or held at least one text part.
func appendParts(dst []byte, raw string, types ...string) ([]byte, bool) {
	if isString(raw) {
		return appendUnescaped(dst, raw), true
	}
	found := false
	eachElement(raw, func(part string) bool {
		var typ, text string
		eachMember(part, func(m member) bool {
			switch m.key {
			case "type":
				typ = m.value(part)
			case "text":
				text = m.value(part)
			}
			return true
		})
		if isString(text) {
			for _, t := range types {
				if str(typ) == t {
					dst = appendUnescaped(dst, text)
					found = true
					break
				}
			}
		}
		return true
	})
	return dst, found
}

// contentBytes returns a content value as tool-result bytes: a string
// unescaped (aliasing the body when it has no escapes), text parts
// concatenated, anything else as raw JSON.
func contentBytes(raw string, types ...string) []byte {
	if isString(raw) {
		if in := raw[1 : len(raw)-1]; strings.IndexByte(in, '\\') < 0 {
			return readOnly(in)
		}
		// One copy, unescaped: the content is kept as bytes, never as a
		// string, so str's conversion would be a second.
		return appendUnescaped(make([]byte, 0, len(raw)), raw)
	}
	if b, ok := appendParts(nil, raw, types...); ok {
		return b
	}
	if isNull(raw) {
		return nil
	}
	return readOnly(raw)
}

// textHashOf hashes a content value's text as wire.TextHash would hash the
// same text read from a response.
func textHashOf(raw string, types ...string) uint64 {
	if isString(raw) {
		return wire.TextHash(str(raw))
	}
	b, _ := appendParts(nil, raw, types...)
	return wire.TextHash(view(b))
}

// clone detaches a string read from a body: bodies live in reused buffers.
func clone(s string) string { return strings.Clone(s) }
