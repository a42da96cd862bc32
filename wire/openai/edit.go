package openai

import (
	"bytes"
	"errors"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// Errors of the parse stage; the pipeline renders them as 400.
var (
	errNotObject = errors.New("openai: body is not a valid JSON object")
	errNoModel   = errors.New("openai: body has no model")
)

// duplicateKeyError reports a governed key given twice. gjson reads the
// first occurrence while most upstream parsers keep the last, so a request
// such as {"max_tokens":10,…,"max_tokens":100000} would be metered on one
// value and served on the other: it is refused instead.
type duplicateKeyError string

func (e duplicateKeyError) Error() string { return "openai: duplicate key " + string(e) }

// edit replaces (raw != nil) or deletes (raw == nil) every top-level member
// named key; a replacement whose key is absent is appended. With extend
// set, raw is instead added at the end of the member's array value, inside
// its brackets (raw brings its own leading comma).
type edit struct {
	key    string
	raw    []byte
	extend bool
	done   bool
}

// topMembers lists the members of the object body, stepping over the
// values that req's layout knows for this body instead of reading them.
// The values are only delimited: callers edit bodies that ParseRequest
// validated, or their own rewrites of them.
func topMembers(dst []member, body []byte, req *wire.Request) ([]member, bool) {
	s := view(body)
	end := jsonscan.Object(s, skipWS(s, 0), false, func(key string, start, v int) int {
		end := req.Layout.End(body, v)
		if end < 0 {
			end = skipValue(s, v)
		}
		dst = append(dst, member{key: key, start: start, vstart: v, end: end})
		return end
	})
	return dst, end >= 0
}

// lastValue returns the raw value of the last member named key, as a walk
// that overwrites on each would read it; firstValue the first's.
func lastValue(ms []member, s, key string) string {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return ms[i].value(s)
		}
	}
	return ""
}

func firstValue(ms []member, s, key string) string {
	for _, m := range ms {
		if m.key == key {
			return m.value(s)
		}
	}
	return ""
}

// rewrite returns the object made of the members ms of s with edits
// applied, copied once into a new slice: the members keep their order and
// their own bytes, and only the white space between them is normalised.
func rewrite(s string, ms []member, edits []edit) []byte {
	var segBuf [48][]byte
	segs := append(segBuf[:0], openBrace)
	n := 0
	for _, m := range ms {
		idx := -1
		for i := range edits {
			if edits[i].key == m.key {
				idx = i
				break
			}
		}
		if idx >= 0 {
			edits[idx].done = true
			if edits[idx].raw == nil {
				continue
			}
		}
		if n > 0 {
			segs = append(segs, comma)
		}
		n++
		switch {
		case idx < 0:
			segs = append(segs, readOnly(s[m.start:m.end]))
		case edits[idx].extend:
			k := m.end - 1 // the closing bracket, white space before it dropped
			for k > m.vstart+1 && isWS(s[k-1]) {
				k--
			}
			segs = append(segs, readOnly(s[m.start:k]), edits[idx].raw, closeBracket)
		default:
			segs = append(segs, readOnly(s[m.start:m.vstart]), edits[idx].raw)
		}
	}
	for _, e := range edits {
		if e.done || e.raw == nil || e.extend {
			continue
		}
		if n > 0 {
			segs = append(segs, comma)
		}
		n++
		kv := appendString(make([]byte, 0, len(e.key)+len(e.raw)+3), e.key)
		segs = append(segs, append(append(kv, ':'), e.raw...))
	}
	segs = append(segs, closeBrace)
	// bytes.Join sizes its result once and does not zero it first.
	return bytes.Join(segs, nil)
}

var (
	openBrace    = []byte{'{'}
	closeBrace   = []byte{'}'}
	closeBracket = []byte{']'}
	comma        = []byte{','}
)

// capEdit lowers the output cap field key (raw value raw) to maxOutput. It
// never raises a smaller value the client set; a non-number is replaced. It
// reports whether the request carries the field at all (null counts as not).
func capEdit(edits []edit, maxOutput int64, key, raw string) ([]edit, bool) {
	if isNull(raw) {
		return edits, false
	}
	if n, ok := num(raw); !ok || n > maxOutput {
		edits = append(edits, edit{key: key, raw: appendInt(nil, maxOutput)})
	}
	return edits, true
}

// serialEdit sets parallel_tool_calls (raw value raw) to false when the
// pipeline asked for one tool call at a time; a request that says so
// already is left as it is. OpenAI refuses the field without tools.
func serialEdit(edits []edit, req *wire.Request, raw string) []edit {
	if req.SerialTools && req.HasTools && raw != "false" {
		edits = append(edits, edit{key: "parallel_tool_calls", raw: []byte("false")})
	}
	return edits
}

// notRun is the result the wrap-up gives a tool call that the agent had not
// answered yet, so that the history stays valid without the tools.
const notRun = "Not run: the gateway is wrapping up this run."

var errNoMessages = errors.New("openai: body has no messages array")

// validObject reports whether body is one valid JSON object.
func validObject(body []byte) bool {
	s := view(body)
	i := skipWS(s, 0)
	return i < len(s) && s[i] == '{' && jsonscan.Valid(s)
}
