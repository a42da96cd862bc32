package anthropic

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// minThinkingBudget is Anthropic's smallest thinking.budget_tokens.
const minThinkingBudget = 1024

// PrepareUpstream caps max_tokens at maxOutput (Anthropic requires the
// field, so it is set when absent) and, when req.SerialTools, sets
// tool_choice.disable_parallel_tool_use. The body is returned as it is,
// same slice, when nothing changes; otherwise a new slice, body is never
// written.
func (Messages) PrepareUpstream(body []byte, req *wire.Request, maxOutput int64) ([]byte, error) {
	out := body
	if maxOutput > 0 {
		var ok bool
		if out, ok = spliceMaxTokens(body, req, maxOutput); !ok {
			var err error
			if out, err = capMaxTokens(body, maxOutput); err != nil {
				return body, err
			}
		}
	}
	if req != nil && req.SerialTools && req.HasTools {
		return serialToolChoice(out)
	}
	return out, nil
}

// serialToolChoice sets tool_choice.disable_parallel_tool_use, keeping the
// choice's type; a request without tool_choice gets the default one, auto.
// A choice of none offers no call at all and is left as it is.
func serialToolChoice(body []byte) ([]byte, error) {
	tc := gjson.Get(view(body), "tool_choice")
	switch {
	case !tc.Exists() || tc.Type == gjson.Null:
		return sjson.SetRawBytes(body, "tool_choice", []byte(`{"type":"auto","disable_parallel_tool_use":true}`))
	case !tc.IsObject() || tc.Get("type").Str == "none" || tc.Get("disable_parallel_tool_use").Type == gjson.True:
		return body, nil
	}
	return sjson.SetRawBytes(body, "tool_choice.disable_parallel_tool_use", []byte("true"))
}

// spliceMaxTokens is capMaxTokens for the common body, one that carries
// max_tokens: the new number is spliced in, copying the body once, and the
// top level is walked stepping over the values req's layout knows (the
// history) instead of searching the whole body as gjson.Get would. ok is
// false when the body needs capMaxTokens: no max_tokens, escaped keys (which
// gjson would match), a structure the walk does not accept.
func spliceMaxTokens(body []byte, req *wire.Request, maxOutput int64) (out []byte, ok bool) {
	s := view(body)
	var layout *wire.Layout
	if req != nil {
		layout = &req.Layout
	}
	mtStart, mtEnd, thStart, thEnd := -1, -1, -1, -1
	escaped := false
	end := jsonscan.Object(s, skipWS(s, 0), false, func(k string, _, v int) int {
		end := -1
		if layout != nil {
			end = layout.End(body, v)
		}
		if end < 0 {
			end = skipValue(s, v)
		}
		switch {
		case strings.IndexByte(k, '\\') >= 0:
			escaped = true
		case k == "max_tokens" && mtStart < 0:
			mtStart, mtEnd = v, end
		case k == "thinking" && thStart < 0:
			thStart, thEnd = v, end
		}
		return end
	})
	if end < 0 || escaped || mtStart < 0 || !jsonscan.Valid(s[mtStart:mtEnd]) {
		return nil, false
	}
	mt := gjson.Parse(s[mtStart:mtEnd])
	if mt.Type == gjson.Number && mt.Int() > 0 && mt.Int() <= maxOutput {
		return body, true
	}
	var num [20]byte
	digits := strconv.AppendInt(num[:0], maxOutput, 10)
	out = bytes.Join([][]byte{body[:mtStart], digits, body[mtEnd:]}, nil)
	if thStart >= 0 {
		th := gjson.Parse(s[thStart:thEnd])
		if th.Get("type").Str == "enabled" && th.Get("budget_tokens").Int() >= maxOutput {
			out, err := fitThinking(out, maxOutput)
			return out, err == nil
		}
	}
	return out, true
}

// capMaxTokens lowers max_tokens to maxOutput and keeps an extended-thinking
// budget below it, since Anthropic rejects budget_tokens >= max_tokens.
func capMaxTokens(body []byte, maxOutput int64) ([]byte, error) {
	s := view(body)
	mt := gjson.Get(s, "max_tokens")
	if mt.Type == gjson.Number && mt.Int() > 0 && mt.Int() <= maxOutput {
		return body, nil
	}
	out, err := sjson.SetRawBytes(body, "max_tokens", strconv.AppendInt(nil, maxOutput, 10))
	if err != nil {
		return body, err
	}
	return fitThinking(out, maxOutput)
}

// fitThinking keeps thinking.budget_tokens under maxTokens: halved while
// that stays at Anthropic's minimum, else thinking is turned off (the API
// accepts earlier thinking blocks in the history with thinking disabled).
// An adaptive or disabled thinking setting has no budget to fit.
func fitThinking(body []byte, maxTokens int64) ([]byte, error) {
	th := gjson.Get(view(body), "thinking")
	if th.Get("type").Str != "enabled" || th.Get("budget_tokens").Int() < maxTokens {
		return body, nil
	}
	if b := maxTokens / 2; b >= minThinkingBudget {
		return sjson.SetRawBytes(body, "thinking.budget_tokens", strconv.AppendInt(nil, b, 10))
	}
	return sjson.DeleteBytes(body, "thinking")
}

// WrapUp rewrites a request as the run's wrap-up call.
//
// Tools: Anthropic rejects a request whose history holds tool_use or
// tool_result blocks but defines no tools ("Requests which include tool_use
// or tool_result blocks must define tools", anthropics/anthropic-sdk-python
// #494), and a wrap-up comes, nearly always, in the middle of a tool loop.
// So the history's tool blocks are flattened into text blocks that say what
// was called and what came back (flattenToolBlocks), and the tools and
// tool_choice go: the wrap-up's prompt is then the smallest the provider
// accepts, without a definition the model cannot use, and the model cannot
// call a tool, which is what "no call beyond the working budget carries
// tools" needs.
//
// Instruction: appended as user text keeping the user/assistant alternation.
// After a user message it becomes a text block at the end of that message's
// content (text after tool_result blocks is valid); after an assistant
// message, or in an empty history, a new user message. An instruction of
// white space only is not appended, since Anthropic rejects blank text.
func (Messages) WrapUp(body []byte, _ *wire.Request, instruction string, maxOutput int64) ([]byte, error) {
	s := view(body)
	if !gjson.Valid(s) {
		return nil, ErrNotObject
	}
	root := gjson.Parse(s)
	if !root.IsObject() {
		return nil, ErrNotObject
	}
	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return nil, ErrNoMessages
	}
	var (
		n          int
		last       gjson.Result
		toolBlocks bool
	)
	msgs.ForEach(func(_, m gjson.Result) bool {
		n++
		last = m
		if !toolBlocks {
			m.Get("content").ForEach(func(_, b gjson.Result) bool {
				t := b.Get("type").Str
				toolBlocks = strings.HasSuffix(t, "tool_use") || strings.HasSuffix(t, "tool_result")
				return !toolBlocks
			})
		}
		return true
	})

	out := body
	var err error
	edit := func(f func([]byte) ([]byte, error)) {
		if err == nil {
			out, err = f(out)
		}
	}
	if toolBlocks {
		flat := flattenToolBlocks(msgs)
		edit(func(b []byte) ([]byte, error) { return sjson.SetRawBytes(b, "messages", flat) })
		last = gjson.ParseBytes(flat).Array()[n-1]
	}
	if root.Get("tools").Exists() {
		edit(func(b []byte) ([]byte, error) { return sjson.DeleteBytes(b, "tools") })
	}
	if root.Get("tool_choice").Exists() {
		edit(func(b []byte) ([]byte, error) { return sjson.DeleteBytes(b, "tool_choice") })
	}

	if strings.TrimSpace(instruction) != "" {
		block := appendTextBlock(nil, instruction)
		if n > 0 && last.Get("role").Str == "user" {
			path := "messages." + strconv.Itoa(n-1) + ".content"
			content := last.Get("content")
			switch {
			case content.IsArray():
				edit(func(b []byte) ([]byte, error) { return sjson.SetRawBytes(b, path+".-1", block) })
			case content.Type == gjson.String && strings.TrimSpace(content.Str) != "":
				// String content becomes a block array, the old text first.
				arr := append([]byte(`[{"type":"text","text":`), content.Raw...)
				arr = append(append(append(arr, "},"...), block...), ']')
				edit(func(b []byte) ([]byte, error) { return sjson.SetRawBytes(b, path, arr) })
			default:
				arr := append(append([]byte{'['}, block...), ']')
				edit(func(b []byte) ([]byte, error) { return sjson.SetRawBytes(b, path, arr) })
			}
		} else {
			msg := append(append([]byte(`{"role":"user","content":[`), block...), "]}"...)
			edit(func(b []byte) ([]byte, error) { return sjson.SetRawBytes(b, "messages.-1", msg) })
		}
	}

	if maxOutput > 0 {
		edit(func(b []byte) ([]byte, error) { return capMaxTokens(b, maxOutput) })
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// flattenToolBlocks returns the messages array with every tool block (the
// client's tool_use and tool_result, and the server and MCP kinds) turned
// into a text block saying what was called and what came back, so that the
// history needs no tool definitions. Other blocks and every message's role
// stay as they are.
func flattenToolBlocks(msgs gjson.Result) []byte {
	return appendArray(make([]byte, 0, len(msgs.Raw)+64), msgs, func(out []byte, m gjson.Result) []byte {
		content := m.Get("content")
		if !content.IsArray() {
			return append(out, m.Raw...)
		}
		blocks := appendArray(make([]byte, 0, len(content.Raw)), content, func(blocks []byte, b gjson.Result) []byte {
			typ := b.Get("type").Str
			switch {
			case strings.HasSuffix(typ, "tool_use"):
				return appendTextBlock(blocks, "[called tool "+b.Get("name").Str+" ("+b.Get("id").Str+") with input "+b.Get("input").Raw+"]")
			case strings.HasSuffix(typ, "tool_result"):
				return appendTextBlock(blocks, toolResultText(b))
			}
			return append(blocks, b.Raw...)
		})
		set, err := sjson.SetRawBytes([]byte(m.Raw), "content", blocks)
		if err != nil {
			set = []byte(m.Raw) // unreachable: m is an object from a valid body
		}
		return append(out, set...)
	})
}

// appendArray appends a JSON array of each element of arr as each renders it.
func appendArray(dst []byte, arr gjson.Result, each func(dst []byte, v gjson.Result) []byte) []byte {
	dst = append(dst, '[')
	first := true
	arr.ForEach(func(_, v gjson.Result) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = each(dst, v)
		return true
	})
	return append(dst, ']')
}

// toolResultText renders a tool result as text: its text content, with
// what is not text (images, documents, search results) named.
func toolResultText(b gjson.Result) string {
	var sb strings.Builder
	sb.WriteString("[result of tool call ")
	sb.WriteString(b.Get("tool_use_id").Str)
	if b.Get("is_error").Bool() {
		sb.WriteString(", an error")
	}
	sb.WriteString("]")
	c := b.Get("content")
	switch {
	case c.Type == gjson.String:
		sb.WriteString("\n")
		sb.WriteString(c.Str)
	case c.IsArray():
		c.ForEach(func(_, part gjson.Result) bool {
			sb.WriteString("\n")
			if t := part.Get("type").Str; t == "text" {
				sb.WriteString(part.Get("text").Str)
			} else {
				sb.WriteString("(" + t + " omitted)")
			}
			return true
		})
	}
	return sb.String()
}

func appendTextBlock(dst []byte, text string) []byte {
	dst = appendJSONString(append(dst, `{"type":"text","text":`...), text)
	return append(dst, '}')
}
