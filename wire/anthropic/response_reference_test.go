package anthropic

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/wiretest"
)

// parseResponseGJSON is the reader ParseResponse replaced, kept as its
// reference: gjson validated the body, then walked it, looking each
// block's fields up again.
func parseResponseGJSON(body []byte) (wire.Response, error) {
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
				v.ForEach(func(k, v gjson.Result) bool {
					if v.Type != gjson.Number {
						return true
					}
					switch k.Str {
					case "input_tokens":
						u.input = v.Int()
					case "output_tokens":
						u.output = v.Int()
					case "cache_read_input_tokens":
						u.cacheRead = v.Int()
					case "cache_creation_input_tokens":
						u.cacheWrite = v.Int()
					}
					return true
				})
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

// oddResponses are bodies whose shape a provider would not send but a
// reader must take the same way as the reference: duplicate members at
// every level, escaped keys, values of other types, numbers gjson reads
// through a float, malformed bodies.
var oddResponses = []string{
	`{}`,
	`[]`,
	`"text"`,
	`{"id":"a","id":"b","model":1,"model":"m\u00e9","stop_reason":"tool_use","stop_reason":null}`,
	`{"i\u0064":"escaped key","\u006dodel":"m","typ\u0065":"error"}`,
	`{"type":"message","type":"error"}`,
	`{"type":"error","type":"message"}`,
	`{"type":1,"type":"error"}`,
	`{"usage":{"input_tokens":1,"output_tokens":2},"usage":{"output_tokens":3}}`,
	`{"usage":{"input_tokens":1},"usage":[1,2]}`,
	`{"usage":{"input_tokens":1.9,"output_tokens":-3,"cache_read_input_tokens":1e3,"cache_creation_input_tokens":"7","input_tokens":99999999999999999999}}`,
	`{"usage":{"in\u0070ut_tokens":5,"output_tokens":true}}`,
	`{"usage":{"input_tokens":9007199254740993,"output_tokens":-0}}`,
	`{"error":{"type":"overloaded_error"}}`,
	`{"error":{"message":"","type":"t","message":"second"}}`,
	`{"error":{"message":"first"},"error":{"type":"x"}}`,
	`{"error":{"message":"first"},"error":"not an object"}`,
	`{"error":{"mess\u0061ge":"escaped"}}`,
	`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b\n\u00e9"},{"text":"untyped","type":"text"}]}`,
	`{"content":[{"type":"text","text":"x","text":"y"},{"type":"text","t\u0065xt":"escaped key"}]}`,
	`{"content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":[1,{"b":null}]}},{"type":"tool_use","id":2,"input":"str"},{"type":"tool_use"}]}`,
	`{"content":[{"type":"tool_use","id":"t1","id":"t2","name":"n","input":{},"input":{"x":1}}]}`,
	`{"content":[{"ty\u0070e":"tool_use","id":"t"},{"type":"tool_\u0075se","i\u0064":"u"}]}`,
	`{"content":{"a":{"type":"text","text":"in an object"},"b":{"type":"tool_use","id":"o"}}}`,
	`{"content":"just text"}`,
	`{"content":[[{"type":"text","text":"nested"}],"s",1,null,true]}`,
	`{"content":[{"type":"text","text":"a"}],"content":[{"type":"text","text":"b"}]}`,
	`{"content":[{"type":"text","text":1}]}`,
	` { "id" : "spaced" , "content" : [ { "type" : "text" , "text" : "t" } ] } `,
	`{"id":"a"} x`,
	`{"id":"a",}`,
	`{"id":"a\x01"}`,
	`{"id":"\ud800"}`,
	`{"id":"bad \q escape"}`,
	`{"content":[{"type":"text","text":"a"},]}`,
	`{"usage":{"input_tokens":01}}`,
	`{"id":"a"`,
	``,
	`{"id":"\u00e9\ud83d\ude00","model":"tr\xffailing"}`,
}

// ParseResponse reads every body as the reference did.
func TestParseResponseMatchesGJSON(t *testing.T) {
	t.Parallel()
	bodies := append([]string(nil), oddResponses...)
	for _, f := range responseSeeds {
		bodies = append(bodies, string(fixture(t, f)))
	}
	for _, b := range bodies {
		wiretest.SameAsReference(t, []byte(b), Messages{}.ParseResponse, parseResponseGJSON)
	}
}

func FuzzParseResponseMatchesGJSON(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(fixture(f, s))
	}
	for _, s := range oddResponses {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		wiretest.SameAsReference(t, body, Messages{}.ParseResponse, parseResponseGJSON)
	})
}
