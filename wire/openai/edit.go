package openai

import "errors"

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
// named key; a replacement whose key is absent is appended.
type edit struct {
	key  string
	raw  []byte
	done bool
}

// rewrite returns a new object built from obj with edits applied, in one
// copy. Members keep their order and their own bytes; only the white space
// between members is normalised.
func rewrite(obj string, edits []edit) []byte {
	extra := 2
	for _, e := range edits {
		extra += len(e.key) + len(e.raw) + 4
	}
	out := make([]byte, 0, len(obj)+extra)
	out = append(out, '{')
	n := 0
	eachMember(obj, func(m member) bool {
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
				return true
			}
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if idx >= 0 {
			out = append(out, obj[m.start:m.vstart]...)
			out = append(out, edits[idx].raw...)
		} else {
			out = append(out, obj[m.start:m.end]...)
		}
		return true
	})
	for _, e := range edits {
		if e.done || e.raw == nil {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = appendString(out, e.key)
		out = append(out, ':')
		out = append(out, e.raw...)
	}
	return append(out, '}')
}

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

// openArray returns arr without its closing bracket (and the white space
// before it), ready for more elements, and whether it already has some.
func openArray(dst []byte, arr string) ([]byte, bool) {
	k := len(arr) - 1
	for k > 1 && isWS(arr[k-1]) {
		k--
	}
	return append(dst, arr[:k]...), !isEmptyArray(arr)
}

// notRun is the result the wrap-up gives a tool call that the agent had not
// answered yet, so that the history stays valid without the tools.
const notRun = "Not run: the gateway is wrapping up this run."

var errNoMessages = errors.New("openai: body has no messages array")

// gjsonValid reports whether body is one valid JSON object.
func gjsonValid(body []byte) bool {
	_, ok := parseObject(body)
	return ok
}
