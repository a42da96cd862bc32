package openai

import (
	"github.com/haltline/haltline/wire"
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

// inputItem is what the turn logic reads of one item.
type inputItem struct {
	kind                    itemKind
	content, callID, output string
}

func readItem(it string) inputItem {
	var typ, role string
	var out inputItem
	eachMember(it, func(m member) bool {
		v := m.value(it)
		switch m.key {
		case "type":
			typ = str(v)
		case "role":
			role = str(v)
		case "content":
			out.content = v
		case "call_id":
			out.callID = v
		case "output":
			out.output = v
		}
		return true
	})
	switch typ {
	case "message", "":
		switch role {
		case "assistant":
			out.kind = itemAssistant
		case "user":
			out.kind = itemUser
		case "system", "developer":
			out.kind = itemSystem
		}
	case "reasoning":
		out.kind = itemAssistant
	case "function_call", "custom_tool_call":
		out.kind = itemCall
	case "function_call_output", "custom_tool_call_output":
		out.kind = itemOutput
	default:
		switch n := len(typ); {
		case n > 7 && typ[n-7:] == "_output":
			out.kind = itemOutput
		case n > 5 && typ[n-5:] == "_call":
			out.kind = itemHostedRun
		}
	}
	return out
}

// textTypes are the content part types whose text counts as message text.
var textTypes = []string{"output_text", "input_text", "text"}

// ParseRequest reads a responses request. Strings are copied out of the
// body; ToolResults[].Content may alias it.
func (Responses) ParseRequest(body []byte) (wire.Request, error) {
	req := wire.Request{API: wire.APIResponses, BodyBytes: len(body)}
	if !gjsonValid(body) {
		return req, errNotObject
	}
	obj := view(body)
	var model, input, maxOut, prev string
	var seen uint16
	var dup string
	ok := eachMember(obj, func(m member) bool {
		v := m.value(obj)
		var bit uint16
		switch m.key {
		case "model":
			bit, model = keyModel, v
		case "input":
			bit, input = keyInput, v
		case "stream":
			bit, req.Stream = keyStream, v == "true"
		case "max_output_tokens":
			bit, maxOut = keyMaxOutput, v
		case "tools":
			bit, req.HasTools = keyTools, isArray(v) && !isEmptyArray(v)
		case "previous_response_id":
			bit, prev = keyPrevious, v
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
	}
	req.Model = clone(str(model))
	req.PreviousResponseID = clone(str(prev))
	if n, ok := num(maxOut); ok {
		req.MaxOutputTokens = n
	}
	switch {
	case isString(input):
		req.Messages = 1
		req.NewUserTurn = true
	case isArray(input):
		readResponsesHistory(&req, input)
	default:
		// No input: a continuation of previous_response_id (or a stored
		// prompt) that adds nothing; a new task only without a handle.
		req.NewUserTurn = req.PreviousResponseID == ""
	}
	return req, nil
}

// readResponsesHistory finds the last assistant turn, the last contiguous run
// of assistant-side items, and reads what follows it.
func readResponsesHistory(req *wire.Request, input string) {
	var turnBuf, tailBuf [16]inputItem
	turn, tail := turnBuf[:0], tailBuf[:0]
	inTurn := false
	eachElement(input, func(raw string) bool {
		req.Messages++
		it := readItem(raw)
		switch it.kind {
		case itemAssistant, itemCall, itemHostedRun:
			if !inTurn {
				inTurn, turn, tail = true, turn[:0], tail[:0]
			}
			turn = append(turn, it)
		case itemOther:
			// References and compaction items neither open nor close a turn.
		default:
			inTurn = false
			tail = append(tail, it)
		}
		return true
	})
	var text []byte
	for _, it := range turn {
		switch it.kind {
		case itemCall:
			if id := str(it.callID); id != "" {
				req.LastAssistantToolCallIDs = append(req.LastAssistantToolCallIDs, clone(id))
			}
		case itemAssistant:
			text, _ = appendParts(text, it.content, textTypes...)
		}
	}
	req.LastAssistantTextHash = wire.TextHash(view(text))
	req.NewUserTurn = len(turn) == 0 && req.PreviousResponseID == ""
	for _, it := range tail {
		switch it.kind {
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

// PrepareUpstream caps max_output_tokens. Responses streams carry their
// usage in response.completed, so nothing else changes.
func (r Responses) PrepareUpstream(body []byte, req *wire.Request, maxOutput int64) ([]byte, error) {
	if maxOutput <= 0 {
		return body, nil
	}
	obj := view(body)
	var buf [1]edit
	edits, has := capEdit(buf[:0], maxOutput, "max_output_tokens", field(obj, "max_output_tokens"))
	if !has {
		edits = append(edits, edit{key: "max_output_tokens", raw: appendInt(nil, maxOutput)})
	}
	if len(edits) == 0 {
		return body, nil
	}
	return rewrite(obj, edits), nil
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
	input := field(obj, "input")
	items := make([]byte, 0, len(input)+len(instruction)+96)
	more := false
	switch {
	case isString(input):
		items = append(items, `[{"role":"user","content":`...)
		items = append(items, input...)
		items = append(items, '}')
		more = true
	case isArray(input):
		items, more = openArray(items, input)
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
	items = append(items, "}]}]"...)

	edits := []edit{
		{key: "input", raw: items},
		{key: "tools"}, {key: "tool_choice"}, {key: "parallel_tool_calls"},
	}
	if maxOutput > 0 {
		var has bool
		edits, has = capEdit(edits, maxOutput, "max_output_tokens", field(obj, "max_output_tokens"))
		if !has {
			edits = append(edits, edit{key: "max_output_tokens", raw: appendInt(nil, maxOutput)})
		}
	}
	return rewrite(obj, edits), nil
}

// ParseResponse reads a non-streamed response object.
func (Responses) ParseResponse(body []byte) (wire.Response, error) {
	var r wire.Response
	if !gjsonValid(body) {
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
