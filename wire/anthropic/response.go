package anthropic

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
)

// usage holds Anthropic's raw counts; norm applies DESIGN §12.
type usage struct {
	input, output, cacheRead, cacheWrite int64
}

// read overwrites the counts present in u. Every count Anthropic sends is a
// whole-message total (message_delta may repeat the input ones), so a later
// value replaces an earlier one and nothing is added twice.
func (x *usage) read(u gjson.Result) {
	u.ForEach(func(k, v gjson.Result) bool {
		if v.Type != gjson.Number {
			return true
		}
		switch k.Str {
		case "input_tokens":
			x.input = v.Int()
		case "output_tokens":
			x.output = v.Int()
		case "cache_read_input_tokens":
			x.cacheRead = v.Int()
		case "cache_creation_input_tokens":
			x.cacheWrite = v.Int()
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

// ParseResponse reads a non-streamed Messages response. An error body
// ({"type":"error",…}) is not a parse failure: it yields FinishReason
// "error" and ErrorMessage, as a stream's error event does. Everything kept
// is copied, so body may be reused afterwards.
func (Messages) ParseResponse(body []byte) (wire.Response, error) {
	var resp wire.Response
	s := view(body)
	if !gjson.Valid(s) {
		return resp, ErrNotResponse
	}
	root := gjson.Parse(s)
	if !root.IsObject() {
		return resp, ErrNotResponse
	}
	var text []byte
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			resp.ID = strings.Clone(v.Str)
		case "model":
			resp.Model = strings.Clone(v.Str)
		case "stop_reason":
			resp.FinishReason = finishReason(v.Str)
		case "usage":
			if v.IsObject() {
				var u usage
				u.read(v)
				resp.Usage, resp.HasUsage = u.norm(), true
			}
		case "error":
			if v.IsObject() {
				resp.ErrorMessage = strings.Clone(v.Get("message").Str)
				if resp.ErrorMessage == "" {
					resp.ErrorMessage = strings.Clone(v.Get("type").Str)
				}
			}
		case "content":
			v.ForEach(func(_, b gjson.Result) bool {
				switch b.Get("type").Str {
				case "text":
					text = appendUnescaped(text, strBody(rawMember(b.Raw, "text")))
				case "tool_use":
					tc := wire.ToolCall{
						ID:        strings.Clone(b.Get("id").Str),
						Name:      strings.Clone(b.Get("name").Str),
						Arguments: []byte(b.Get("input").Raw),
					}
					if len(tc.Arguments) == 0 {
						tc.Arguments = []byte("{}")
					}
					resp.ToolCalls = append(resp.ToolCalls, tc)
				}
				return true
			})
		}
		return true
	})
	if resp.ErrorMessage != "" || root.Get("type").Str == "error" {
		resp.FinishReason = "error"
	}
	resp.TextHash = wire.TextHash(view(text))
	resp.Text = head(text, wire.TextKeep)
	return resp, nil
}
