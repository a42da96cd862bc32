package anthropic

import (
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// Errors of ParseRequest and WrapUp (the caller renders them as 400), and of
// ParseResponse.
var (
	ErrNotObject   = errors.New("anthropic: request body is not a JSON object")
	ErrNoModel     = errors.New("anthropic: request has no model")
	ErrNoMessages  = errors.New("anthropic: request has no messages array")
	ErrNotResponse = errors.New("anthropic: response body is not a JSON object")
)

// ParseRequest reads the fields of wire.Request from a Messages request in
// one pass over a zero-copy view of the body: the top level and the
// messages array are walked, each message read for its role and content
// and every other value only delimited (strings skipped from quote to
// quote, never decoded); then the content of the last assistant message
// and of the messages after it is read. The structure walked is checked;
// a body malformed inside a value is rejected by Anthropic itself. Strings
// are copied into one allocation; ToolResults[].Content aliases body where
// it can (no escape sequences) and is read-only.
func (Messages) ParseRequest(body []byte) (wire.Request, error) {
	req := wire.Request{API: wire.APIMessages, BodyBytes: len(body)}
	s := view(body)
	var modelRaw, msgsRaw, maxRaw string
	var h history
	end := jsonscan.Object(s, skipWS(s, 0), false, func(k string, _, v int) int {
		var end int
		if k == "messages" && s[v] == '[' {
			// The last messages member is the one read.
			h = history{}
			end = h.read(s, v)
		} else {
			end = skipChecked(s, v)
		}
		if end < 0 {
			return -1
		}
		switch val := s[v:end]; k {
		case "model":
			modelRaw = val
		case "messages":
			msgsRaw = val
		case "stream":
			req.Stream = val == "true"
		case "max_tokens":
			maxRaw = val
		case "tools":
			req.HasTools = nonEmptyArray(gjson.Parse(val))
			req.Tools = ""
			if req.HasTools {
				req.Tools = val
			}
		}
		req.Layout.Note(body, v, end)
		return end
	})
	if end < 0 || skipWS(s, end) != len(s) {
		return req, wire.Refusal(ErrNotObject, s)
	}
	var err error
	if req.MaxOutputTokens, err = wire.OutputCap("max_tokens", maxRaw); err != nil {
		return req, err
	}
	model := gjson.Parse(modelRaw)
	if model.Type != gjson.String || model.Str == "" {
		return req, ErrNoModel
	}
	if len(msgsRaw) == 0 || msgsRaw[0] != '[' {
		return req, ErrNoMessages
	}
	req.Messages = h.n
	req.LastAssistantPrefixHash, req.ConversationHash = h.lastPrefix, h.conv

	var (
		sb    [512]byte
		strs  = sb[:0]
		sp    span
		idBuf [16]span
		ids   = idBuf[:0]
		trBuf [8]toolResult
		trs   = trBuf[:0]
	)
	strs, modelSpan := addSpan(strs, model.Str)
	if h.hasLast {
		var tb [1024]byte
		text := tb[:0]
		// Text is taken raw and unescaped into a stack buffer: gjson would
		// allocate a decoded copy of each string only to hash it.
		content := rawContent(h.last)
		switch {
		case content.Type == gjson.String:
			text = appendUnescaped(text, strBody(content.Raw))
		case content.IsArray():
			content.ForEach(func(_, b gjson.Result) bool {
				switch b.Get("type").Str {
				case "text":
					text = appendUnescaped(text, strBody(rawMember(b.Raw, "text")))
				case "tool_use":
					strs, sp = addSpan(strs, b.Get("id").Str)
					ids = append(ids, sp)
				}
				return true
			})
		}
		req.LastAssistantTextHash = wire.TextHash(view(text))
	} else {
		req.NewUserTurn = true
	}
	for i := range h.tailN {
		content := rawContent(h.tailAt(i))
		if content.Type == gjson.String {
			req.NewUserTurn = true
			continue
		}
		content.ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").Str {
			case "text":
				req.NewUserTurn = true
			case "tool_result":
				tr, id := readToolResult(b)
				strs, tr.id = addSpan(strs, id)
				trs = append(trs, tr)
			}
			return true
		})
	}

	kept := string(strs)
	req.Model = modelSpan.of(kept)
	if len(ids) > 0 {
		req.LastAssistantToolCallIDs = make([]string, len(ids))
		for i, sp := range ids {
			req.LastAssistantToolCallIDs[i] = sp.of(kept)
		}
	}
	if len(trs) > 0 {
		req.ToolResults = make([]wire.ToolResult, len(trs))
		for i, tr := range trs {
			req.ToolResults[i] = wire.ToolResult{CallID: tr.id.of(kept), Content: tr.content, IsError: tr.isError}
		}
	}
	return req, nil
}

// history is what the lineage needs of the messages array: its length, and
// the raw content of the last assistant message and of the user messages
// after it. A message is read for its role and content only.
type history struct {
	n       int
	last    string // content of the last assistant message
	hasLast bool
	// conv folds the user messages read so far, lastPrefix those before
	// the last assistant message (wire.FoldConversation).
	conv, lastPrefix uint64
	// The contents of the user messages after it: the first few in an
	// array of the struct, so that a parse allocates nothing for them.
	tail  [4]string
	more  []string
	tailN int
}

func (h *history) addTail(c string) {
	if h.tailN < len(h.tail) {
		h.tail[h.tailN] = c
	} else {
		h.more = append(h.more, c)
	}
	h.tailN++
}

func (h *history) tailAt(i int) string {
	if i < len(h.tail) {
		return h.tail[i]
	}
	return h.more[i-len(h.tail)]
}

// read walks the array at s[i] and returns the index past it, or -1.
func (h *history) read(s string, i int) int {
	return jsonscan.Array(s, i, func(v int) int {
		h.n++
		if s[v] != '{' {
			return skipChecked(s, v)
		}
		var role, content string
		var hasRole, hasContent bool
		end := jsonscan.Object(s, v, false, func(k string, _, v int) int {
			end := skipChecked(s, v)
			if end < 0 {
				return -1
			}
			// The first of each, as gjson's Get would find it; gjson also
			// matches a key written with escapes.
			if !hasRole && keyIs(k, "role") {
				role, hasRole = s[v:end], true
			} else if !hasContent && k == "content" {
				content, hasContent = s[v:end], true
			}
			return end
		})
		if stringIs(role, "assistant") {
			h.last, h.hasLast, h.tailN, h.more = content, true, 0, h.more[:0]
			h.lastPrefix = h.conv
		} else if stringIs(role, "user") {
			h.addTail(content)
			h.conv = wire.FoldConversation(h.conv, userTextHash(content))
		}
		return end
	})
}

// userTextHash hashes the text of a user message's content: a string, or
// its text blocks. Tool results and cache marks are left out: frameworks
// move cache_control from message to message between calls.
func userTextHash(raw string) uint64 {
	switch {
	case raw == "":
		return 0
	case raw[0] == '"':
		return wire.TextHash(strBody(raw))
	case raw[0] != '[':
		return 0
	}
	// The history's walk validated these bytes: each block is skipped by
	// the scanner (tool results are most of a long history), and only a
	// text block's text is read.
	var tb [512]byte
	text := tb[:0]
	jsonscan.Array(raw, 0, func(v int) int {
		if raw[v] != '{' {
			return jsonscan.SkipValue(raw, v)
		}
		var typ, txt string
		end := jsonscan.Object(raw, v, false, func(key string, _, vs int) int {
			e := jsonscan.SkipValue(raw, vs)
			switch key {
			case "type":
				typ = raw[vs:e]
			case "text":
				txt = raw[vs:e]
			}
			return e
		})
		if txt != "" && stringIs(typ, "text") {
			text = appendUnescaped(text, strBody(txt))
		}
		return end
	})
	return wire.TextHash(view(text))
}

// keyIs reports whether the raw key k names name once unescaped.
func keyIs(k, name string) bool {
	if strings.IndexByte(k, '\\') < 0 {
		return k == name
	}
	return stringIs(`"`+k+`"`, name)
}

// stringIs reports whether the raw JSON value raw is the string name, read
// as gjson reads a string (escapes decoded).
func stringIs(raw, name string) bool {
	in := strBody(raw)
	if len(in) == len(name) && in == name {
		return true
	}
	if strings.IndexByte(in, '\\') < 0 || len(in) < len(name) {
		return false
	}
	var buf [32]byte
	return string(appendUnescaped(buf[:0], in)) == name
}

// rawContent returns a message's content with Raw set but, for string
// content, Str left undecoded: callers read the text from Raw.
func rawContent(raw string) gjson.Result {
	switch {
	case raw == "":
		return gjson.Result{}
	case raw[0] == '"':
		return gjson.Result{Type: gjson.String, Raw: raw}
	}
	return gjson.Parse(raw)
}

// toolResult is a wire.ToolResult whose id is still a span.
type toolResult struct {
	id      span
	content []byte
	isError bool
}

// readToolResult reads a tool_result block. Its content is a string, or an
// array of blocks: text-only arrays become their concatenated text (what the
// model reads); arrays holding images or documents stay raw JSON, so two
// different observations never hash alike for lack of text.
func readToolResult(b gjson.Result) (tr toolResult, id string) {
	b.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "tool_use_id":
			id = v.Str
		case "is_error":
			tr.isError = v.Type == gjson.True
		case "content":
			tr.content = resultContent(v)
		}
		return true
	})
	return tr, id
}

func resultContent(v gjson.Result) []byte {
	switch {
	case v.Type == gjson.String:
		// gjson's Str aliases the body unless it had to unescape, in which
		// case it is a fresh copy; either way no second copy is made.
		return alias(v.Str)
	case v.IsArray():
		var (
			n, texts int
			only     gjson.Result
			allText  = true
		)
		v.ForEach(func(_, b gjson.Result) bool {
			n++
			if b.Get("type").Str != "text" {
				allText = false
				return false
			}
			texts++
			only = b
			return true
		})
		if !allText || n == 0 {
			return alias(v.Raw)
		}
		if texts == 1 {
			return alias(only.Get("text").Str)
		}
		var out []byte
		v.ForEach(func(_, b gjson.Result) bool {
			out = appendUnescaped(out, strBody(rawMember(b.Raw, "text")))
			return true
		})
		return out
	}
	return nil
}

// nonEmptyArray reports whether v is an array with at least one element.
func nonEmptyArray(v gjson.Result) bool {
	if !v.IsArray() {
		return false
	}
	found := false
	v.ForEach(func(_, _ gjson.Result) bool {
		found = true
		return false
	})
	return found
}
