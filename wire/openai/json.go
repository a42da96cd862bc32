package openai

import (
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// view returns b as a string without copying, so gjson and the scanner below
// read bodies in place. The string must not outlive b's contents.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// readOnly returns s's bytes without copying. Callers must not write to them.
func readOnly(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// The scanner below walks JSON text without unescaping anything. gjson
// unescapes every string value it matches or iterates, which allocates for
// each escaped value; stream deltas (tool arguments are full of \") and long
// tool outputs would pay that on every chunk or message. The scanner never
// panics on malformed input: it stops.

func isWS(c byte) bool { return jsonscan.IsWS(c) }

func skipWS(s string, i int) int { return jsonscan.SkipWS(s, i) }

// skipString returns the index past the string starting with the quote at
// s[i], or -1.
func skipString(s string, i int) int { return jsonscan.SkipString(s, i) }

// skipValue returns the index past the value starting at s[i], or -1.
func skipValue(s string, i int) int { return jsonscan.SkipValue(s, i) }

// member is one key/value pair of an object: obj[start:end] is the whole
// `"key": value`, obj[vstart:end] the value.
type member struct {
	key                string // raw key without quotes (escapes left as is)
	start, vstart, end int
}

func (m member) value(obj string) string { return obj[m.vstart:m.end] }

// eachMember calls fn for each member of the object obj, in order, until fn
// returns false. It reports false when obj is not a well-formed object.
func eachMember(obj string, fn func(m member) bool) bool {
	return walkObject(obj, skipWS(obj, 0), fn) >= 0
}

// readTop reads a request's top-level object (s views body) in one
// validating pass: the history array under historyKey (its first
// occurrence) is read by readHistory, every other value only validated;
// field gets each member's key and raw value and returns the key's bit, 0
// for a key it ignores. A known key given twice is an error, as is a body
// that is not exactly one valid object. The layout of the large values is
// noted in req.
func readTop(body []byte, s string, req *wire.Request, historyKey string, historyBit uint16,
	readHistory func(s string, i int) int, field func(key, val string) uint16) error {
	var seen uint16
	var dup string
	end := jsonscan.Object(s, skipWS(s, 0), true, func(key string, _, v int) int {
		var end int
		if key == historyKey && seen&historyBit == 0 && s[v] == '[' {
			end = readHistory(s, v)
		} else {
			end = jsonscan.ValidValue(s, v)
		}
		if end < 0 {
			return -1
		}
		bit := field(key, s[v:end])
		if seen&bit != 0 && dup == "" {
			dup = key
		}
		seen |= bit
		req.Layout.Note(body, v, end)
		return end
	})
	switch {
	case end < 0 || skipWS(s, end) != len(s):
		return errNotObject
	case dup != "":
		return duplicateKeyError(dup)
	}
	return nil
}

// walkObject walks the object starting at s[i], calling fn for each member
// (offsets relative to s), and returns the index past the object: one pass
// both reads the members and finds the end. It returns -1 when the object is
// malformed, and the index reached when fn stops it.
func walkObject(s string, i int, fn func(m member) bool) int {
	stopped := -1
	end := jsonscan.Object(s, i, false, func(key string, start, v int) int {
		m := member{key: key, start: start, vstart: v, end: skipValue(s, v)}
		if m.end < 0 {
			return -1
		}
		if !fn(m) {
			stopped = m.end
			return -1
		}
		return m.end
	})
	if stopped >= 0 {
		return stopped
	}
	return end
}

// eachElement calls fn for each element of the array arr until fn returns
// false or the array turns out malformed.
func eachElement(arr string, fn func(v string) bool) {
	jsonscan.Array(arr, skipWS(arr, 0), func(v int) int {
		end := skipValue(arr, v)
		if end < 0 || !fn(arr[v:end]) {
			return -1
		}
		return end
	})
}

// field returns the raw value of key in the object obj, "" when absent.
// fields reads, in one walk of obj, the raw value of each of keys into
// the same place of out: the first occurrence, as field does; "" when
// absent (a present value is never empty).
func fields(obj string, keys, out []string) {
	eachMember(obj, func(m member) bool {
		for i, k := range keys {
			if out[i] == "" && m.key == k {
				out[i] = m.value(obj)
			}
		}
		return true
	})
}

func field(obj, key string) string {
	var v string
	eachMember(obj, func(m member) bool {
		if m.key == key {
			v = m.value(obj)
			return false
		}
		return true
	})
	return v
}

func isNull(raw string) bool   { return raw == "" || raw == "null" }
func isString(raw string) bool { return len(raw) >= 2 && raw[0] == '"' }
func isArray(raw string) bool  { return len(raw) >= 2 && raw[0] == '[' }
func isObject(raw string) bool { return len(raw) >= 2 && raw[0] == '{' }

// isEmptyArray reports whether raw is [] (with any white space inside).
func isEmptyArray(raw string) bool {
	return isArray(raw) && skipWS(raw, 1) == len(raw)-1
}

// num reads a raw JSON number as an integer; ok is false for anything else.
func num(raw string) (int64, bool) {
	if isNull(raw) {
		return 0, false // an absent field: spares strconv's error values
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return n, true
	}
	if f, err := strconv.ParseFloat(raw, 64); err == nil && f == f {
		return int64(f), true
	}
	return 0, false
}

// str returns the unescaped content of a raw JSON string; it aliases raw when
// there is nothing to unescape. Anything but a string gives "".
func str(raw string) string {
	if !isString(raw) {
		return ""
	}
	in := raw[1 : len(raw)-1]
	for i := 0; i < len(in); i++ {
		if in[i] == '\\' {
			return string(appendUnescaped(make([]byte, 0, len(in)), raw))
		}
	}
	return in
}

// appendUnescaped appends the content of the raw JSON string raw (quotes
// included) to dst, decoded as gjson does, so text read here and text read
// through gjson hash the same.
func appendUnescaped(dst []byte, raw string) []byte {
	if !isString(raw) {
		return dst
	}
	return jsonscan.AppendUnescaped(dst, raw[1:len(raw)-1])
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte { return gjson.AppendJSONString(dst, s) }

func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
