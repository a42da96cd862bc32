package openai

import (
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/wire"
)

// Chat is the Chat Completions API (POST /v1/chat/completions).
type Chat struct{}

var _ wire.Codec = Chat{}

// API names the API.
func (Chat) API() wire.API { return wire.APIChat }

// Bits of the governed top-level keys, to refuse duplicates.
const (
	keyModel = 1 << iota
	keyMessages
	keyStream
	keyStreamOptions
	keyMaxCompletion
	keyMaxTokens
	keyTools
	keyFunctions
	keyInput
	keyMaxOutput
	keyPrevious
)

// ParseRequest reads a chat request. Strings are copied out of the body (it
// lives in a reused buffer); ToolResults[].Content may alias it.
func (Chat) ParseRequest(body []byte) (wire.Request, error) {
	req := wire.Request{API: wire.APIChat, BodyBytes: len(body)}
	if !gjsonValid(body) {
		return req, errNotObject
	}
	obj := view(body)
	var model, messages, maxComp, maxTok string
	var seen uint16
	var dup string
	ok := eachMember(obj, func(m member) bool {
		v := m.value(obj)
		var bit uint16
		switch m.key {
		case "model":
			bit, model = keyModel, v
		case "messages":
			bit, messages = keyMessages, v
		case "stream":
			bit, req.Stream = keyStream, v == "true"
		case "stream_options":
			bit, req.IncludeUsage = keyStreamOptions, field(v, "include_usage") == "true"
		case "max_completion_tokens":
			bit, maxComp = keyMaxCompletion, v
		case "max_tokens":
			bit, maxTok = keyMaxTokens, v
		case "tools":
			bit = keyTools
			req.HasTools = req.HasTools || (isArray(v) && !isEmptyArray(v))
		case "functions": // legacy function calling
			bit = keyFunctions
			req.HasTools = req.HasTools || (isArray(v) && !isEmptyArray(v))
		}
		if seen&bit != 0 {
			dup = m.key
			return false
		}
		seen |= bit
		return true
	})
	switch {
	case !ok:
		return req, errNotObject
	case dup != "":
		return req, duplicateKeyError(dup)
	case str(model) == "":
		return req, errNoModel
	case !isArray(messages):
		return req, errNoMessages
	}
	req.Model = clone(str(model))
	if n, ok := num(maxComp); ok {
		req.MaxOutputTokens = n
	} else if n, ok := num(maxTok); ok {
		req.MaxOutputTokens = n
	}
	readChatHistory(&req, messages)
	return req, nil
}

// readChatHistory finds the last assistant message in one pass, keeping only
// the messages after it; the rest is only counted.
func readChatHistory(req *wire.Request, messages string) {
	var last string
	var tailBuf [16]string
	tail := tailBuf[:0]
	// One pass per message: the walk that finds its role also finds its end.
	i := skipWS(messages, 0) + 1
	for {
		i = skipWS(messages, i)
		if i >= len(messages) || messages[i] == ']' {
			break
		}
		if messages[i] == ',' {
			i++
			continue
		}
		start := i
		var role string
		if messages[i] == '{' {
			i = walkObject(messages, i, func(m member) bool {
				if m.key == "role" {
					role = m.value(messages)
				}
				return true
			})
		} else {
			i = skipValue(messages, i)
		}
		if i < 0 {
			break
		}
		req.Messages++
		if str(role) == "assistant" {
			last, tail = messages[start:i], tail[:0]
			continue
		}
		tail = append(tail, messages[start:i])
	}
	req.NewUserTurn = last == ""
	if last != "" {
		eachElement(field(last, "tool_calls"), func(tc string) bool {
			if id := str(field(tc, "id")); id != "" {
				req.LastAssistantToolCallIDs = append(req.LastAssistantToolCallIDs, clone(id))
			}
			return true
		})
		req.LastAssistantTextHash = textHashOf(field(last, "content"), "text")
	}
	for _, msg := range tail {
		var role, content, callID string
		eachMember(msg, func(m member) bool {
			switch m.key {
			case "role":
				role = m.value(msg)
			case "content":
				content = m.value(msg)
			case "tool_call_id":
				callID = m.value(msg)
			}
			return true
		})
		switch str(role) {
		case "user":
			if hasContent(content) {
				req.NewUserTurn = true
			}
		case "tool":
			req.ToolResults = append(req.ToolResults, wire.ToolResult{
				CallID:  clone(str(callID)),
				Content: contentBytes(content, "text"),
			})
		}
	}
}

// hasContent reports whether a message content value carries anything.
func hasContent(raw string) bool {
	return !isNull(raw) && raw != `""` && !isEmptyArray(raw)
}

// PrepareUpstream injects stream_options.include_usage on streams whose
// client did not ask for it (the tap strips the usage chunk again) and caps
// the output at maxOutput when positive.
func (c Chat) PrepareUpstream(body []byte, req *wire.Request, maxOutput int64) ([]byte, error) {
	if req == nil {
		r, err := c.ParseRequest(body)
		if err != nil {
			return body, err
		}
		req = &r
	}
	var buf [4]edit
	edits := chatEdits(buf[:0], view(body), req, maxOutput)
	if len(edits) == 0 {
		return body, nil
	}
	return rewrite(view(body), edits), nil
}

// chatEdits returns the edits PrepareUpstream makes; WrapUp makes them too,
// so its body can be forwarded as it is.
func chatEdits(edits []edit, obj string, req *wire.Request, maxOutput int64) []edit {
	var streamOpts, maxComp, maxTok string
	eachMember(obj, func(m member) bool {
		switch m.key {
		case "stream_options":
			streamOpts = m.value(obj)
		case "max_completion_tokens":
			maxComp = m.value(obj)
		case "max_tokens":
			maxTok = m.value(obj)
		}
		return true
	})
	if req.Stream && !req.IncludeUsage && field(streamOpts, "include_usage") != "true" {
		raw := []byte(`{"include_usage":true}`)
		if isObject(streamOpts) {
			if set, err := sjson.SetBytes([]byte(streamOpts), "include_usage", true); err == nil {
				raw = set
			}
		}
		edits = append(edits, edit{key: "stream_options", raw: raw})
	}
	if maxOutput > 0 {
		var hasComp, hasTok bool
		edits, hasComp = capEdit(edits, maxOutput, "max_completion_tokens", maxComp)
		edits, hasTok = capEdit(edits, maxOutput, "max_tokens", maxTok)
		if !hasComp && !hasTok {
			edits = append(edits, edit{key: "max_completion_tokens", raw: appendInt(nil, maxOutput)})
		}
	}
	return edits
}

// WrapUp removes the tools, answers any tool call of the last assistant
// message still without a result (a tool_calls message must be followed by
// a tool message for each id), appends the instruction as a user message and
// caps the output. The result also carries PrepareUpstream's edits.
func (c Chat) WrapUp(body []byte, req *wire.Request, instruction string, maxOutput int64) ([]byte, error) {
	if req == nil {
		r, err := c.ParseRequest(body)
		if err != nil {
			return body, err
		}
		req = &r
	}
	obj := view(body)
	messages := field(obj, "messages")
	if !isArray(messages) {
		return body, errNoMessages
	}
	msgs := make([]byte, 0, len(messages)+len(instruction)+64)
	msgs, more := openArray(msgs, messages)
	if !req.NewUserTurn {
		for _, id := range missingResults(req) {
			if more {
				msgs = append(msgs, ',')
			}
			more = true
			msgs = append(msgs, `{"role":"tool","tool_call_id":`...)
			msgs = appendString(msgs, id)
			msgs = append(msgs, `,"content":`...)
			msgs = appendString(msgs, notRun)
			msgs = append(msgs, '}')
		}
	}
	if more {
		msgs = append(msgs, ',')
	}
	msgs = append(msgs, `{"role":"user","content":`...)
	msgs = appendString(msgs, instruction)
	msgs = append(msgs, "}]"...)

	edits := []edit{
		{key: "messages", raw: msgs},
		{key: "tools"}, {key: "tool_choice"}, {key: "parallel_tool_calls"},
		{key: "functions"}, {key: "function_call"},
	}
	edits = chatEdits(edits, obj, req, maxOutput)
	return rewrite(obj, edits), nil
}

// missingResults lists the last assistant turn's call ids that no tool
// result after it answers.
func missingResults(req *wire.Request) []string {
	var out []string
	for _, id := range req.LastAssistantToolCallIDs {
		found := false
		for _, tr := range req.ToolResults {
			if tr.CallID == id {
				found = true
				break
			}
		}
		if !found {
			out = append(out, id)
		}
	}
	return out
}

// ParseResponse reads a non-streamed chat completion.
func (Chat) ParseResponse(body []byte) (wire.Response, error) {
	var r wire.Response
	if !gjsonValid(body) {
		return r, errNotObject
	}
	obj := view(body)
	var choices string
	eachMember(obj, func(m member) bool {
		v := m.value(obj)
		switch m.key {
		case "id":
			r.ID = clone(str(v))
		case "model":
			r.Model = clone(str(v))
		case "usage":
			r.Usage, r.HasUsage = usageFrom(v)
		case "choices":
			choices = v
		case "error":
			if isObject(v) {
				r.ErrorMessage = clone(str(field(v, "message")))
				r.FinishReason = "error"
			}
		}
		return true
	})
	var first string
	eachElement(choices, func(c string) bool {
		first = c
		return false
	})
	if first == "" {
		return r, nil
	}
	msg := field(first, "message")
	if fr := chatFinish(field(first, "finish_reason")); fr != "" {
		r.FinishReason = fr
	}
	text, _ := appendParts(nil, field(msg, "content"), "text", "output_text")
	r.TextHash = wire.TextHash(view(text))
	r.Text = head(text)
	eachElement(field(msg, "tool_calls"), func(tc string) bool {
		fn := field(tc, "function")
		r.ToolCalls = append(r.ToolCalls, wire.ToolCall{
			ID:        clone(str(field(tc, "id"))),
			Name:      clone(str(field(fn, "name"))),
			Arguments: appendUnescaped(nil, field(fn, "arguments")),
		})
		return true
	})
	if fc := field(msg, "function_call"); isObject(fc) { // legacy, no id
		r.ToolCalls = append(r.ToolCalls, wire.ToolCall{
			Name:      clone(str(field(fc, "name"))),
			Arguments: appendUnescaped(nil, field(fc, "arguments")),
		})
	}
	return r, nil
}
