package anthropic

import (
	"strings"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// usage holds Anthropic's raw counts; norm applies docs/design.md §12.
type usage struct {
	input, output, cacheRead, cacheWrite int64
}

// read overwrites the counts present in u, the raw JSON of a usage object.
// Every count Anthropic sends is a whole-message total (message_delta may
// repeat the input ones), so a later value replaces an earlier one and
// nothing is added twice.
func (x *usage) read(u string) {
	members(u, func(k, v string) bool {
		n, ok := intValue(v)
		if !ok {
			return true
		}
		switch unescapedKey(k) {
		case "input_tokens":
			x.input = n
		case "output_tokens":
			x.output = n
		case "cache_read_input_tokens":
			x.cacheRead = n
		case "cache_creation_input_tokens":
			x.cacheWrite = n
		}
		return true
	})
}

func (x usage) norm() wire.Usage {
	return wire.Usage{
		InputTokens:      x.input + x.cacheRead + x.cacheWrite,
		OutputTokens:     x.output,
		CachedTokens:     x.cacheRead,
		CacheWriteTokens: x.cacheWrite,
	}
}

// ParseResponse reads a non-streamed Messages response, in the pass that
// validates it, rather than validating it and walking it again for each
// block's fields. It reads what gjson reads, down to duplicate members and
// odd shapes (TestParseResponseMatchesGJSON). An error body ({"type":"error",…}) is
// not a parse failure: it yields FinishReason "error" and ErrorMessage, as
// a stream's error event does. Everything kept is copied, so body may be
// reused afterwards.
func (Messages) ParseResponse(body []byte) (wire.Response, error) {
	var resp wire.Response
	s := view(body)
	var text []byte
	typ, typed := "", false
	end := jsonscan.Object(s, skipWS(s, 0), true, func(key string, _, v int) int {
		name := unescapedKey(key)
		if name == "content" && s[v] == '[' {
			// Its blocks are read in the pass that validates them.
			return readBlocks(s, v, func(b *block) { text = b.read(&resp, text) })
		}
		end := jsonscan.ValidValue(s, v)
		if end < 0 {
			return -1
		}
		val := s[v:end]
		switch name {
		case "id":
			resp.ID = strings.Clone(strValue(val))
		case "model":
			resp.Model = strings.Clone(strValue(val))
		case "stop_reason":
			resp.FinishReason = finishReason(strValue(val))
		case "type":
			if !typed { // the first one counts, as for a lookup
				typ, typed = strValue(val), true
			}
		case "usage":
			if val[0] == '{' {
				var u usage
				u.read(val)
				resp.Usage, resp.HasUsage = u.norm(), true
			}
		case "error":
			if val[0] == '{' {
				msg := strValue(firstMember(val, "message"))
				if msg == "" {
					msg = strValue(firstMember(val, "type"))
				}
				resp.ErrorMessage = strings.Clone(msg)
			}
		case "content":
			// Not an array: an object's member values are its blocks, a
			// scalar is a block with no type.
			eachElement(val, func(raw string) {
				var b block
				if raw[0] == '{' {
					members(raw, func(k, v string) bool { b.see(k, v); return true })
				}
				text = b.read(&resp, text)
			})
		}
		return end
	})
	if end < 0 || skipWS(s, end) != len(s) {
		return wire.Response{}, ErrNotResponse
	}
	if resp.ErrorMessage != "" || typ == "error" {
		resp.FinishReason = "error"
	}
	resp.TextHash = wire.TextHash(view(text))
	resp.Text = head(text, wire.TextKeep)
	return resp, nil
}

// block holds the members of a content block that a response's reading
// uses: the first of each, as a lookup finds it (by its decoded key), and
// the text by its raw key, as the request's reading takes it.
type block struct {
	typ, id, name, input, text string
	seen                       uint8 // which of them were found
}

const (
	seenType = 1 << iota
	seenID
	seenName
	seenInput
	seenText
)

// see takes one member of the block.
func (b *block) see(key, val string) {
	if key == "text" && b.seen&seenText == 0 {
		b.text, b.seen = val, b.seen|seenText
	}
	var field *string
	var bit uint8
	switch unescapedKey(key) {
	case "type":
		field, bit = &b.typ, seenType
	case "id":
		field, bit = &b.id, seenID
	case "name":
		field, bit = &b.name, seenName
	case "input":
		field, bit = &b.input, seenInput
	default:
		return
	}
	if b.seen&bit == 0 {
		*field, b.seen = val, b.seen|bit
	}
}

// read adds the block to resp: its text to text (returned), a tool use to
// the calls.
func (b *block) read(resp *wire.Response, text []byte) []byte {
	switch strValue(b.typ) {
	case "text":
		text = appendUnescaped(text, strBody(b.text))
	case "tool_use":
		tc := wire.ToolCall{
			ID:        strings.Clone(strValue(b.id)),
			Name:      strings.Clone(strValue(b.name)),
			Arguments: []byte(b.input),
		}
		if len(tc.Arguments) == 0 {
			tc.Arguments = []byte("{}")
		}
		resp.ToolCalls = append(resp.ToolCalls, tc)
	}
	return text
}

// readBlocks validates the content array at s[i], handing each block to
// fn as it is read; it returns the index past the array, or -1.
func readBlocks(s string, i int, fn func(b *block)) int {
	return jsonscan.Array(s, i, func(e int) int {
		var b block
		var end int
		if s[e] == '{' {
			end = jsonscan.Object(s, e, true, func(key string, _, v int) int {
				end := jsonscan.ValidValue(s, v)
				if end >= 0 {
					b.see(key, s[v:end])
				}
				return end
			})
		} else {
			end = jsonscan.ValidValue(s, e) // no type: nothing to read
		}
		if end >= 0 {
			fn(&b)
		}
		return end
	})
}
