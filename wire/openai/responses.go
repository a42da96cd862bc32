package openai

import (
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// Responses is the Responses API (POST /v1/responses).
type Responses struct{}

var _ wire.Codec = Responses{}

// API names the API.
func (Responses) API() wire.API { return wire.APIResponses }

// itemKind classifies an input or output item for the turn logic.
type itemKind uint8

const (
	itemOther     itemKind = iota // neither side: item_reference, compaction, …
	itemUser                      // a user message
	itemAssistant                 // assistant message or reasoning
	itemCall                      // function_call / custom_tool_call: carries a call_id
	itemHostedRun                 // a hosted tool call (web_search_call, …): assistant side
	itemOutput                    // function_call_output / custom_tool_call_output
	itemSystem                    // system or developer message
)

// inputItem is what the turn logic reads of one item: raw values, the
// last of each key.
type inputItem struct {
	kind                    itemKind
	content, callID, output string
}

// readItem validates the item at s[i] and reads it; it returns the index
// past the item, or -1.
func readItem(s string, i int) (inputItem, int) {
	var out inputItem
	if s[i] != '{' {
		return out, jsonscan.ValidValue(s, i) // neither side
	}
	var typ, role string
	end := jsonscan.Object(s, i, true, func(key string, _, v int) int {
		end := jsonscan.ValidValue(s, v)
		if end < 0 {
			return -1
		}
		switch val := s[v:end]; key {
		case "type":
			typ = val
		case "role":
			role = val
		case "content":
			out.content = val
		case "call_id":
			out.callID = val
		case "output":
			out.output = val
		}
		return end
	})
	out.kind = classify(str(typ), str(role))
	return out, end
}

func classify(typ, role string) itemKind {
	switch typ {
	case "message", "":
		switch role {
		case "assistant":
			return itemAssistant
		case "user":
			return itemUser
		case "system", "developer":
			return itemSystem
		}
	case "reasoning":
		return itemAssistant
	case "function_call", "custom_tool_call":
		return itemCall
	case "function_call_output", "custom_tool_call_output":
		return itemOutput
	default:
		switch n := len(typ); {
		case n > 7 && typ[n-7:] == "_output":
			return itemOutput
		case n > 5 && typ[n-5:] == "_call":
			return itemHostedRun
		}
	}
	return itemOther
}

// textTypes are the content part types whose text counts as message text.
var textTypes = []string{"output_text", "input_text", "text"}

// ParseRequest reads a responses request in one validating pass, as
// Chat.ParseRequest does. Strings are copied out of the body;
// ToolResults[].Content may alias it.
func (Responses) ParseRequest(body []byte) (wire.Request, error) {
	req := wire.Request{API: wire.APIResponses, BodyBytes: len(body)}
	s := view(body)
	var model, input, maxOut, prev string
	var h responsesHistory
	err := readTop(body, s, &req, "input", keyInput, h.read, func(key, val string) uint16 {
		switch key {
		case "model":
			model = val
			return keyModel
		case "input":
			input = val
			return keyInput
		case "stream":
			req.Stream = val == "true"
			return keyStream
		case "max_output_tokens":
			maxOut = val
			return keyMaxOutput
		case "tools":
			req.HasTools = isArray(val) && !isEmptyArray(val)
			req.Tools = ""
			if req.HasTools {
				req.Tools = val
			}
			return keyTools
		case "previous_response_id":
			prev = val
			return keyPrevious
		}
		return 0
	})
	switch {
	case err != nil:
		return req, wire.Refusal(err, s)
	case str(model) == "":
		return req, errNoModel
	}
	req.Model = clone(str(model))
	req.PreviousResponseID = clone(str(prev))
	if req.MaxOutputTokens, err = wire.OutputCap("max_output_tokens", maxOut); err != nil {
		return req, err
	}
	switch {
	case isString(input):
		req.Messages = 1
		req.NewUserTurn = true
	case isArray(input):
		h.apply(&req)
	default:
		// No input: a continuation of previous_response_id (or a stored
		// prompt) that adds nothing; a new task only without a handle.
		req.NewUserTurn = req.PreviousResponseID == ""
	}
	return req, nil
}

// responsesHistory is the input array as the lineage needs it: the last
// assistant turn, the last contiguous run of assistant-side items, and
// what follows it.
type responsesHistory struct {
	n int
	// conv folds the user messages read so far, turnPrefix those before
	// the last assistant turn (wire.FoldConversation).
	conv, turnPrefix uint64
	// The items of the turn and of the tail: the first few in arrays of
	// the struct, so that a parse allocates nothing for them.
	turn, tail itemList
}

type itemList struct {
	first [8]inputItem
	more  []inputItem
	n     int
}

func (l *itemList) reset() { l.n, l.more = 0, l.more[:0] }

func (l *itemList) add(it inputItem) {
	if l.n < len(l.first) {
		l.first[l.n] = it
	} else {
		l.more = append(l.more, it)
	}
	l.n++
}

func (l *itemList) at(i int) *inputItem {
	if i < len(l.first) {
		return &l.first[i]
	}
	return &l.more[i-len(l.first)]
}

// read validates the array at s[i] and returns the index past it, or -1.
func (h *responsesHistory) read(s string, i int) int {
	inTurn := false
	return jsonscan.Array(s, i, func(v int) int {
		h.n++
		it, end := readItem(s, v)
		switch it.kind {
		case itemAssistant, itemCall, itemHostedRun:
			if !inTurn {
				inTurn = true
				h.turn.reset()
				h.tail.reset()
				h.turnPrefix = h.conv
			}
			h.turn.add(it)
		case itemOther:
			// References and compaction items neither open nor close a turn.
		default:
			if it.kind == itemUser {
				h.conv = wire.FoldConversation(h.conv, textHashOf(it.content, textTypes...))
			}
			inTurn = false
			h.tail.add(it)
		}
		return end
	})
}

// apply sets the lineage fields of req (PreviousResponseID already set).
func (h *responsesHistory) apply(req *wire.Request) {
	req.Messages = h.n
	var tb [256]byte
	text := tb[:0]
	for i := range h.turn.n {
		switch it := h.turn.at(i); it.kind {
		case itemCall:
			if id := str(it.callID); id != "" {
				req.LastAssistantToolCallIDs = append(req.LastAssistantToolCallIDs, clone(id))
			}
		case itemAssistant:
			text, _ = appendParts(text, it.content, textTypes...)
		}
	}
	req.LastAssistantTextHash = wire.TextHash(view(text))
	req.LastAssistantPrefixHash, req.ConversationHash = h.turnPrefix, h.conv
	req.NewUserTurn = h.turn.n == 0 && req.PreviousResponseID == ""
	for i := range h.tail.n {
		switch it := h.tail.at(i); it.kind {
		case itemUser:
			if hasContent(it.content) {
				req.NewUserTurn = true
			}
		case itemOutput:
			req.ToolResults = append(req.ToolResults, wire.ToolResult{
				CallID:  clone(str(it.callID)),
				Content: contentBytes(it.output, textTypes...),
			})
		}
	}
}

// PrepareUpstream caps max_output_tokens and sets parallel_tool_calls
// false when req.SerialTools. Responses streams carry their usage in
// response.completed, so nothing else changes.
func (r Responses) PrepareUpstream(body []byte, req *wire.Request, maxOutput int64) ([]byte, error) {
	if maxOutput <= 0 && (req == nil || !req.SerialTools) {
		return body, nil
	}
	if req == nil {
		req = &wire.Request{} // no layout: the body is read in full
	}
	obj := view(body)
	var mbuf [16]member
	ms, ok := topMembers(mbuf[:0], body, req)
	if !ok {
		return body, errNotObject
	}
	var buf [2]edit
	edits := serialEdit(buf[:0], req, firstValue(ms, obj, "parallel_tool_calls"))
	if maxOutput > 0 {
		var has bool
		edits, has = capEdit(edits, maxOutput, "max_output_tokens", firstValue(ms, obj, "max_output_tokens"))
		if !has {
			edits = append(edits, edit{key: "max_output_tokens", raw: appendInt(nil, maxOutput)})
		}
	}
	if len(edits) == 0 {
		return body, nil
	}
	return rewrite(obj, ms, edits), nil
}

// WrapUp removes the tools, answers any function call of the last assistant
// turn still without an output, appends the instruction as a user message
// item (a string input becomes an array with the original text first) and
// caps the output.
func (r Responses) WrapUp(body []byte, req *wire.Request, instruction string, maxOutput int64) ([]byte, error) {
	if req == nil {
		p, err := r.ParseRequest(body)
		if err != nil {
			return body, err
		}
		req = &p
	}
	obj := view(body)
	var mbuf [16]member
	ms, _ := topMembers(mbuf[:0], body, req)
	input := firstValue(ms, obj, "input")
	var items []byte
	extend, more := false, false
	switch {
	case isString(input):
		items = append(items, `[{"role":"user","content":`...)
		items = append(items, input...)
		items = append(items, '}')
		more = true
	case isArray(input):
		// The input array is extended where it lies, not copied here first.
		extend, more = true, !isEmptyArray(input)
		if !req.NewUserTurn {
			for _, id := range missingResults(req) {
				if more {
					items = append(items, ',')
				}
				more = true
				items = append(items, `{"type":"function_call_output","call_id":`...)
				items = appendString(items, id)
				items = append(items, `,"output":`...)
				items = appendString(items, notRun)
				items = append(items, '}')
			}
		}
	default:
		items = append(items, '[')
	}
	if more {
		items = append(items, ',')
	}
	items = append(items, `{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
	items = appendString(items, instruction)
	items = append(items, "}]}"...)
	if !extend {
		items = append(items, ']')
	}

	edits := []edit{
		{key: "input", raw: items, extend: extend},
		{key: "tools"}, {key: "tool_choice"}, {key: "parallel_tool_calls"},
	}
	if maxOutput > 0 {
		var has bool
		edits, has = capEdit(edits, maxOutput, "max_output_tokens", firstValue(ms, obj, "max_output_tokens"))
		if !has {
			edits = append(edits, edit{key: "max_output_tokens", raw: appendInt(nil, maxOutput)})
		}
	}
	return rewrite(obj, ms, edits), nil
}

// ParseResponse reads a non-streamed response object.
func (Responses) ParseResponse(body []byte) (wire.Response, error) {
	var r wire.Response
	if !validObject(body) {
		return r, errNotObject
	}
	var text []byte
	readResponseObject(&r, view(body), &text, true)
	r.TextHash = wire.TextHash(view(text))
	r.Text = head(text)
	return r, nil
}

// readResponseObject reads a response object (a body, or the response of a
// response.completed event): id, model, usage, function calls, status and,
// when withText, the output text appended to text.
func readResponseObject(r *wire.Response, obj string, text *[]byte, withText bool) {
	var status, output, incomplete, errObj string
	eachMember(obj, func(m member) bool {
		v := m.value(obj)
		switch m.key {
		case "id":
			if s := str(v); s != "" {
				r.ID = clone(s)
			}
		case "model":
			if s := str(v); s != "" {
				r.Model = clone(s)
			}
		case "usage":
			if u, ok := usageFrom(v); ok {
				r.Usage, r.HasUsage = u, true
			}
		case "status":
			status = str(v)
		case "output":
			output = v
		case "incomplete_details":
			incomplete = v
		case "error":
			errObj = v
		}
		return true
	})
	if isArray(output) && !isEmptyArray(output) {
		// The final output is authoritative: it replaces the calls read
		// from output_item.done events.
		r.ToolCalls = r.ToolCalls[:0]
		eachElement(output, func(it string) bool {
			var typ, callID, name, args, content string
			eachMember(it, func(m member) bool {
				v := m.value(it)
				switch m.key {
				case "type":
					typ = str(v)
				case "call_id":
					callID = v
				case "name":
					name = v
				case "arguments":
					args = v
				case "content":
					content = v
				}
				return true
			})
			switch typ {
			case "function_call":
				r.ToolCalls = append(r.ToolCalls, wire.ToolCall{
					ID: clone(str(callID)), Name: clone(str(name)), Arguments: appendUnescaped(nil, args),
				})
			case "message":
				if withText {
					*text, _ = appendParts(*text, content, "output_text")
				}
			}
			return true
		})
	}
	if isObject(errObj) {
		r.ErrorMessage = clone(str(field(errObj, "message")))
	}
	switch status {
	case "completed":
		r.FinishReason = "stop"
		if len(r.ToolCalls) > 0 {
			r.FinishReason = "tool_calls"
		}
	case "incomplete":
		r.FinishReason = "length"
		if str(field(incomplete, "reason")) == "content_filter" {
			r.FinishReason = "content_filter"
		}
	case "failed", "cancelled":
		r.FinishReason = "error"
	}
}
