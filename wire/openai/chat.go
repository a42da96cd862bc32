package openai

import (
	"github.com/tidwall/sjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
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

// ParseRequest reads a chat request in one pass that validates the whole
// body (an accepted body is forwarded, and edited, as JSON) and reads only
// what the gateway uses: the top-level fields, each message's role, and the
// last assistant message and the messages after it. Strings are copied out
// of the body (it lives in a reused buffer); ToolResults[].Content may
// alias it.
func (Chat) ParseRequest(body []byte) (wire.Request, error) {
	req := wire.Request{API: wire.APIChat, BodyBytes: len(body)}
	s := view(body)
	var model, messages, maxComp, maxTok string
	var h chatHistory
	err := readTop(body, s, &req, "messages", keyMessages, h.read, func(key, val string) uint16 {
		switch key {
		case "model":
			model = val
			return keyModel
		case "messages":
			messages = val
			return keyMessages
		case "stream":
			req.Stream = val == "true"
			return keyStream
		case "stream_options":
			req.IncludeUsage = field(val, "include_usage") == "true"
			return keyStreamOptions
		case "max_completion_tokens":
			maxComp = val
			return keyMaxCompletion
		case "max_tokens":
			maxTok = val
			return keyMaxTokens
		case "tools":
			if isArray(val) && !isEmptyArray(val) {
				req.HasTools, req.Tools = true, val
			}
			return keyTools
		case "functions": // legacy function calling
			req.HasTools = req.HasTools || (isArray(val) && !isEmptyArray(val))
			return keyFunctions
		}
		return 0
	})
	switch {
	case err != nil:
		return req, wire.Refusal(err, s)
	case str(model) == "":
		return req, errNoModel
	case !isArray(messages):
		return req, errNoMessages
	}
	req.Model = clone(str(model))
	comp, err := wire.OutputCap("max_completion_tokens", maxComp)
	if err != nil {
		return req, err
	}
	tok, err := wire.OutputCap("max_tokens", maxTok)
	if err != nil {
		return req, err
	}
	req.MaxOutputTokens = comp
	if comp == 0 {
		req.MaxOutputTokens = tok
	}
	h.apply(&req)
	return req, nil
}

// chatMessage is what the history pass keeps of a message: raw values,
// aliasing the body.
type chatMessage struct {
	role, content, callID   string // the last of each, as a duplicate key would be read
	firstContent, toolCalls string // the first of each
}

// chatHistory is the messages array as the lineage needs it: the last
// assistant message and the messages after it. Everything before is only
// counted and validated, so a long history costs one read of its bytes.
type chatHistory struct {
	n       int
	last    chatMessage
	hasLast bool
	// conv folds the user messages read so far, lastPrefix those before
	// the last assistant message (wire.FoldConversation).
	conv, lastPrefix uint64
	// The messages after it: the first few in an array of the struct, so
	// that a parse allocates nothing for them.
	tail  [8]chatMessage
	more  []chatMessage
	tailN int
}

// read validates the array at s[i] and returns the index past it, or -1.
func (h *chatHistory) read(s string, i int) int {
	return jsonscan.Array(s, i, func(v int) int {
		h.n++
		if s[v] != '{' {
			return jsonscan.ValidValue(s, v)
		}
		var m chatMessage
		end := jsonscan.Object(s, v, true, func(key string, _, v int) int {
			end := jsonscan.ValidValue(s, v)
			if end < 0 {
				return -1
			}
			switch val := s[v:end]; key {
			case "role":
				m.role = val
			case "content":
				if m.firstContent == "" {
					m.firstContent = val
				}
				m.content = val
			case "tool_calls":
				if m.toolCalls == "" {
					m.toolCalls = val
				}
			case "tool_call_id":
				m.callID = val
			}
			return end
		})
		switch role := str(m.role); {
		case role == "assistant":
			h.last, h.hasLast, h.tailN, h.more = m, true, 0, h.more[:0]
			h.lastPrefix = h.conv
			return end
		case role == "user":
			h.conv = wire.FoldConversation(h.conv, textHashOf(m.content, "text"))
		}
		switch {
		case h.tailN < len(h.tail):
			h.tail[h.tailN] = m
			h.tailN++
		default:
			h.more = append(h.more, m)
			h.tailN++
		}
		return end
	})
}

// at returns the i-th message after the last assistant message.
func (h *chatHistory) at(i int) *chatMessage {
	if i < len(h.tail) {
		return &h.tail[i]
	}
	return &h.more[i-len(h.tail)]
}

// apply sets the lineage fields of req.
func (h *chatHistory) apply(req *wire.Request) {
	req.Messages = h.n
	req.NewUserTurn = !h.hasLast
	req.LastAssistantPrefixHash, req.ConversationHash = h.lastPrefix, h.conv
	if h.hasLast {
		eachElement(h.last.toolCalls, func(tc string) bool {
			if id := str(field(tc, "id")); id != "" {
				req.LastAssistantToolCallIDs = append(req.LastAssistantToolCallIDs, clone(id))
			}
			return true
		})
		req.LastAssistantTextHash = textHashOf(h.last.firstContent, "text")
	}
	for i := range h.tailN {
		m := h.at(i)
		switch str(m.role) {
		case "user":
			if hasContent(m.content) {
				req.NewUserTurn = true
			}
		case "tool":
			req.ToolResults = append(req.ToolResults, wire.ToolResult{
				CallID:  clone(str(m.callID)),
				Content: contentBytes(m.content, "text"),
			})
		}
	}
}

// hasContent reports whether a message content value carries anything.
func hasContent(raw string) bool {
	return !isNull(raw) && raw != `""` && !isEmptyArray(raw)
}

// PrepareUpstream injects stream_options.include_usage on streams whose
// client did not ask for it (the tap strips the usage chunk again), caps
// the output at maxOutput when positive and sets parallel_tool_calls false
// when req.SerialTools.
func (c Chat) PrepareUpstream(body []byte, req *wire.Request, maxOutput int64) ([]byte, error) {
	if req == nil {
		r, err := c.ParseRequest(body)
		if err != nil {
			return body, err
		}
		req = &r
	}
	if maxOutput <= 0 && (!req.Stream || req.IncludeUsage) && !req.SerialTools {
		return body, nil // chatEdits would find nothing to do
	}
	var mbuf [16]member
	ms, ok := topMembers(mbuf[:0], body, req)
	if !ok {
		return body, errNotObject
	}
	var buf [4]edit
	edits := chatEdits(buf[:0], view(body), ms, req, maxOutput)
	if len(edits) == 0 {
		return body, nil
	}
	return rewrite(view(body), ms, edits), nil
}

// chatEdits returns the edits PrepareUpstream makes; WrapUp makes them too,
// so its body can be forwarded as it is.
func chatEdits(edits []edit, obj string, ms []member, req *wire.Request, maxOutput int64) []edit {
	streamOpts := lastValue(ms, obj, "stream_options")
	if req.Stream && !req.IncludeUsage && field(streamOpts, "include_usage") != "true" {
		raw := []byte(`{"include_usage":true}`)
		if isObject(streamOpts) {
			if set, err := sjson.SetBytes([]byte(streamOpts), "include_usage", true); err == nil {
				raw = set
			}
		}
		edits = append(edits, edit{key: "stream_options", raw: raw})
	}
	edits = serialEdit(edits, req, lastValue(ms, obj, "parallel_tool_calls"))
	if maxOutput > 0 {
		var hasComp, hasTok bool
		edits, hasComp = capEdit(edits, maxOutput, "max_completion_tokens", lastValue(ms, obj, "max_completion_tokens"))
		edits, hasTok = capEdit(edits, maxOutput, "max_tokens", lastValue(ms, obj, "max_tokens"))
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
	var mbuf [16]member
	ms, ok := topMembers(mbuf[:0], body, req)
	messages := firstValue(ms, obj, "messages")
	if !ok || !isArray(messages) {
		return body, errNoMessages
	}
	// The messages array is extended where it lies, not copied here first.
	var msgs []byte
	more := !isEmptyArray(messages)
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
	msgs = append(msgs, '}')

	edits := []edit{
		{key: "messages", raw: msgs, extend: true},
		{key: "tools"}, {key: "tool_choice"}, {key: "parallel_tool_calls"},
		{key: "functions"}, {key: "function_call"},
	}
	edits = chatEdits(edits, obj, ms, req, maxOutput)
	return rewrite(obj, ms, edits), nil
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

// The members ParseResponse reads of a tool call, each object in one walk
// (fields).
var (
	callKeys     = [2]string{"id", "function"}
	functionKeys = [2]string{"name", "arguments"}
)

// ParseResponse reads a non-streamed chat completion in the pass that
// validates it: the walk goes down into the first choice, its message and
// its tool calls where it finds them, so a tool call's bytes are read once
// rather than once for each level that holds them. As encoding/json would,
// the last "choices" member counts; inside it, the first of each key.
func (Chat) ParseResponse(body []byte) (wire.Response, error) {
	var r wire.Response
	var c firstChoice
	s := view(body)
	end := jsonscan.Object(s, skipWS(s, 0), true, func(key string, _, v int) int {
		if key == "choices" {
			c = firstChoice{}
			if s[v] == '[' {
				return c.readChoices(s, v)
			}
		}
		end := jsonscan.ValidValue(s, v)
		if end < 0 {
			return -1
		}
		switch val := s[v:end]; key {
		case "id":
			r.ID = clone(str(val))
		case "model":
			r.Model = clone(str(val))
		case "usage":
			r.Usage, r.HasUsage = usageFrom(val)
		case "error":
			if isObject(val) {
				r.ErrorMessage = clone(str(field(val, "message")))
				r.FinishReason = "error"
			}
		}
		return end
	})
	if end < 0 || skipWS(s, end) != len(s) {
		return wire.Response{}, errNotObject
	}
	if !c.found {
		return r, nil
	}
	if fr := chatFinish(c.finish); fr != "" {
		r.FinishReason = fr
	}
	text, _ := appendParts(nil, c.content, "text", "output_text")
	r.TextHash = wire.TextHash(view(text))
	r.Text = head(text)
	r.ToolCalls = c.calls
	if fc := c.functionCall; isObject(fc) { // legacy, no id
		r.ToolCalls = append(r.ToolCalls, callOf("", fc))
	}
	return r, nil
}

// firstChoice is what ParseResponse reads of a completion's first choice:
// raw values (a present value is never empty), and its tool calls.
type firstChoice struct {
	found                         bool // the choices array has an element
	messageSeen, callsSeen        bool // the first "message", "tool_calls" was read
	finish, content, functionCall string
	calls                         []wire.ToolCall
}

// readChoices validates the choices array at s[i], reading its first
// element, and returns the index past it, or -1.
func (c *firstChoice) readChoices(s string, i int) int {
	return jsonscan.Array(s, i, func(e int) int {
		if c.found || s[e] != '{' {
			c.found = true
			return jsonscan.ValidValue(s, e)
		}
		c.found = true
		return jsonscan.Object(s, e, true, func(key string, _, v int) int {
			if key == "message" && !c.messageSeen {
				c.messageSeen = true
				if s[v] == '{' {
					return c.readMessage(s, v)
				}
			}
			end := jsonscan.ValidValue(s, v)
			if key == "finish_reason" && c.finish == "" && end >= 0 {
				c.finish = s[v:end]
			}
			return end
		})
	})
}

// readMessage validates the message object at s[i], reading its content,
// tool calls and legacy function call.
func (c *firstChoice) readMessage(s string, i int) int {
	return jsonscan.Object(s, i, true, func(key string, _, v int) int {
		if key == "tool_calls" && !c.callsSeen {
			c.callsSeen = true
			if s[v] == '[' {
				return jsonscan.Array(s, v, func(e int) int {
					end := jsonscan.ValidValue(s, e)
					if end >= 0 {
						c.calls = append(c.calls, toolCallFrom(s[e:end]))
					}
					return end
				})
			}
		}
		end := jsonscan.ValidValue(s, v)
		if end < 0 {
			return -1
		}
		switch key {
		case "content":
			if c.content == "" {
				c.content = s[v:end]
			}
		case "function_call":
			if c.functionCall == "" {
				c.functionCall = s[v:end]
			}
		}
		return end
	})
}

// toolCallFrom reads one element of a message's tool_calls (an element
// that is not an object gives an empty call, which the run still counts).
func toolCallFrom(tc string) wire.ToolCall {
	var call [2]string // id, function
	fields(tc, callKeys[:], call[:])
	return callOf(call[0], call[1])
}

// callOf is the call of raw id (may be empty) and raw function object.
func callOf(id, function string) wire.ToolCall {
	var fn [2]string // name, arguments
	fields(function, functionKeys[:], fn[:])
	return wire.ToolCall{
		ID:        clone(str(id)),
		Name:      clone(str(fn[0])),
		Arguments: appendUnescaped(nil, fn[1]),
	}
}
