package anthropic

import (
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire/jsonscan"
)

// view returns b as a string without copying, for gjson to read. The string
// must not outlive b nor be retained: every string the package keeps is
// copied out (see span), because the caller's buffers are reused.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// alias returns the bytes of a string that gjson sliced out of a view of a
// caller's body, without copying; the result is read-only.
func alias(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// strBody returns the inside of a JSON string literal (raw with its quotes).
func strBody(raw string) string {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		return raw[1 : len(raw)-1]
	}
	return ""
}

// appendUnescaped decodes a JSON string body the way gjson does (see
// jsonscan.AppendUnescaped): both sides of a text hash decode through it.
func appendUnescaped(dst []byte, s string) []byte { return jsonscan.AppendUnescaped(dst, s) }

// appendJSONString appends s as a JSON string literal. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does, so the output is always valid JSON.
func appendJSONString(dst []byte, s string) []byte {
	return append(jsonscan.AppendEscaped(append(dst, '"'), s, false), '"')
}

// head returns at most n bytes of b as a string, cut back to a rune boundary
// so the partial result stays valid UTF-8.
func head(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	cut := n
	for cut > 0 && cut > n-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut])
}

// span is where one kept string lies in a request's string buffer: the
// small strings a parse keeps (model, ids) are gathered in one buffer and
// converted to one string, a single allocation instead of one per id.
type span struct{ from, to int32 }

// addSpan appends s to buf and returns where it lies.
func addSpan(buf []byte, s string) ([]byte, span) {
	from := len(buf)
	buf = append(buf, s...)
	return buf, span{int32(from), int32(len(buf))}
}

func (sp span) of(s string) string { return s[sp.from:sp.to] }

// members calls fn with the key (its raw text between the quotes) and the
// raw value of each member of the JSON object obj, until fn returns false.
// It reports whether obj is a well-formed object at its top level (nested
// values are only delimited, not validated). Unlike gjson's ForEach it never
// decodes a value, so skipping a long string (a system prompt, a pasted
// file) costs no allocation; strings are skipped with IndexByte.
func members(obj string, fn func(key, val string) bool) bool {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return skipWS(obj, i+1) == len(obj)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		end := skipString(obj, i)
		if end < 0 {
			return false
		}
		key := obj[i+1 : end-1]
		i = skipWS(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		i = skipWS(obj, i+1)
		vend := skipValue(obj, i)
		if vend <= i {
			return false
		}
		if !fn(key, obj[i:vend]) {
			return true
		}
		i = skipWS(obj, vend)
		if i >= len(obj) {
			return false
		}
		switch obj[i] {
		case '}':
			return skipWS(obj, i+1) == len(obj)
		case ',':
			i = skipWS(obj, i+1)
		default:
			return false
		}
	}
}

// rawMember returns the raw JSON of the top-level member key of object obj,
// or "" when absent or malformed. gjson's Get unescapes a string value into
// a new string; the tap needs the raw literal to unescape into its own
// buffers without an allocation per delta.
func rawMember(obj, key string) string {
	var raw string
	members(obj, func(k, v string) bool {
		if k == key {
			raw = v
			return false
		}
		return true
	})
	return raw
}

// firstMember returns the raw value of the first member of object obj
// whose key, unescaped, is key — a lookup's answer, where a request's
// fields go by their raw key (rawMember) — or "" (obj not an object).
// obj is a valid JSON value.
func firstMember(obj, key string) string {
	var raw string
	if len(obj) > 0 && obj[0] == '{' {
		members(obj, func(k, v string) bool {
			if unescapedKey(k) == key {
				raw = v
				return false
			}
			return true
		})
	}
	return raw
}

// unescapedKey is a member's raw key, decoded when it holds an escape
// ("i\u0064" is "id" to a lookup).
func unescapedKey(raw string) string {
	if strings.IndexByte(raw, '\\') < 0 {
		return raw
	}
	return string(appendUnescaped(nil, raw))
}

// strValue is the decoded text of a raw JSON string, or "" for any other
// value. It may alias raw.
func strValue(raw string) string {
	body := strBody(raw)
	if strings.IndexByte(body, '\\') < 0 {
		return body
	}
	return string(appendUnescaped(nil, body))
}

// intValue reads a raw JSON number as a count the way gjson's Int does
// (a whole number exactly; a fraction or an exponent through a float,
// truncated); ok is false for anything but a number.
func intValue(raw string) (int64, bool) {
	if raw == "" || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return n, true
	}
	return gjson.Parse(raw).Int(), true
}

// eachElement calls fn with each element of a raw array, each member value
// of a raw object, or raw itself otherwise: what gjson's ForEach yields.
// raw is a valid JSON value.
func eachElement(raw string, fn func(v string)) {
	switch raw[0] {
	case '[':
		jsonscan.Array(raw, 0, func(v int) int {
			end := skipValue(raw, v)
			if end > v {
				fn(raw[v:end])
			}
			return end
		})
	case '{':
		members(raw, func(_, v string) bool {
			fn(v)
			return true
		})
	default:
		fn(raw)
	}
}

func skipWS(s string, i int) int { return jsonscan.SkipWS(s, i) }

// skipString returns the index after the string literal starting at s[i]
// (a quote), or -1.
func skipString(s string, i int) int { return jsonscan.SkipString(s, i) }

// skipValue returns the index after the JSON value starting at s[i], or -1.
func skipValue(s string, i int) int { return jsonscan.SkipValue(s, i) }

// skipChecked is skipValue for the values of a structure ParseRequest
// walks: strings and containers are only delimited, but a number or a
// literal, short, is checked, so that a stray byte after one (0") cannot
// pass for part of it and shift what the walk reads next.
func skipChecked(s string, i int) int {
	switch s[i] {
	case '"', '{', '[':
		return jsonscan.SkipValue(s, i)
	}
	return jsonscan.ValidValue(s, i)
}
