package anthropic

import (
	"errors"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
)

// Errors of ParseRequest and WrapUp (the caller renders them as 400), and of
// ParseResponse.
var (
	ErrNotObject   = errors.New("anthropic: request body is not a JSON object")
	ErrNoModel     = errors.New("anthropic: request has no model")
	ErrNoMessages  = errors.New("anthropic: request has no messages array")
	ErrNotResponse = errors.New("anthropic: response body is not a JSON object")
)

// ParseRequest reads the fields of wire.Request from a Messages request. It
// walks a zero-copy view of the body: the top level once without decoding
// any value, the messages array once reading only each role (gjson), and the
// content of the last assistant message and of the messages after it.
// Strings are copied into one allocation; ToolResults[].Content aliases body
// where it can (no escape sequences) and is read-only.
func (Messages) ParseRequest(body []byte) (wire.Request, error) {
	req := wire.Request{API: wire.APIMessages, BodyBytes: len(body)}
	// The top level is walked with members, which checks its structure and
	// skips values without decoding them. A full gjson.Valid pass would
	// double the cost of a 200 KB body; a body malformed deeper inside is
	// rejected by Anthropic itself, and gjson never fails on it here.
	var modelRaw, msgsRaw string
	ok := members(view(body), func(k, v string) bool {
		switch k {
		case "model":
			modelRaw = v
		case "messages":
			msgsRaw = v
		case "stream":
			req.Stream = v == "true"
		case "max_tokens":
			if mt := gjson.Parse(v); mt.Type == gjson.Number {
				req.MaxOutputTokens = mt.Int()
			}
		case "tools":
			req.HasTools = nonEmptyArray(gjson.Parse(v))
		}
		return true
	})
	if !ok {
		return req, ErrNotObject
	}
	model := gjson.Parse(modelRaw)
	if model.Type != gjson.String || model.Str == "" {
		return req, ErrNoModel
	}
	messages := gjson.Parse(msgsRaw)
	if !messages.IsArray() {
		return req, ErrNoMessages
	}

	// One pass over the history: count, and keep the last assistant message
	// and the messages after it. Only "role" is read, so long contents are
	// skipped, not unescaped.
	var (
		last    gjson.Result
		hasLast bool
		tailBuf [4]gjson.Result
		tail    = tailBuf[:0]
	)
	messages.ForEach(func(_, m gjson.Result) bool {
		req.Messages++
		switch m.Get("role").Str {
		case "assistant":
			last, hasLast = m, true
			tail = tail[:0]
		case "user":
			tail = append(tail, m)
		}
		return true
	})

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
	if hasLast {
		var tb [1024]byte
		text := tb[:0]
		// Text is taken raw and unescaped into a stack buffer: gjson would
		// allocate a decoded copy of each string only to hash it.
		content := rawContent(last)
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
	for _, m := range tail {
		content := rawContent(m)
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

// rawContent returns a message's content with Raw set but, for string
// content, Str left undecoded: callers read the text from Raw.
func rawContent(m gjson.Result) gjson.Result {
	raw := rawMember(m.Raw, "content")
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
