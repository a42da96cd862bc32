package contextmgr

import (
	"strconv"
	"strings"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// The slow readers, for the shapes the fast readers leave alone: member
// names with escapes, items that are not objects, content objects. They
// look members up through jsonscan.Value, which reads them as gjson does
// (names compared decoded, the first of duplicates), as the request's
// upstream reads them.

// slowItem reads an item member by member, for the shapes the fast
// readers leave alone.
func slowItem(api wire.API, g jsonscan.Value) item {
	switch api {
	case wire.APIChat:
		return chatItem(g)
	case wire.APIResponses:
		return responsesItem(g)
	default:
		return anthropicItem(g)
	}
}

// parseConvSlow is the slow reader, for bodies the reader leaves to it;
// it weighs the items and the envelope apart, as scan would. The body is
// read from a copy, as the texts it keeps must not change with it.
func parseConvSlow(api wire.API, body []byte, c *conv) bool {
	c.exact = false
	root := jsonscan.Parse(string(body))
	if api == wire.APIResponses {
		c.noDrop = root.Get("previous_response_id").String() != ""
	}
	list := root.Get(c.listPath)
	if !list.IsArray() {
		return false
	}
	if list.At > 0 && list.At+len(list.Raw) <= len(body) {
		c.listStart, c.listEnd = list.At, list.At+len(list.Raw)
	}
	cheap := api != wire.APIMessages
	var itemsW int64
	list.ForEach(func(_ string, _ int, v jsonscan.Value) bool {
		it := slowItem(api, v)
		it.raw = rawOf(body, v)
		it.w, it.tools = scan(it.raw, cheap)
		itemsW += it.w
		c.items = append(c.items, it)
		return true
	})
	if c.listEnd > 0 {
		w1, t1 := scan(body[:c.listStart], cheap)
		w2, t2 := scan(body[c.listEnd:], cheap)
		c.envW, c.envTools = w1+w2, t1 || t2
	} else {
		bodyW, tools := scan(body, cheap)
		c.envW, c.envTools = bodyW-itemsW, tools
	}
	c.head = headEnd(c.items)
	return true
}

// rawOf returns v's bytes, aliasing body where they were read from. The
// slice is only ever read.
func rawOf(body []byte, v jsonscan.Value) []byte {
	if v.At > 0 && v.At+len(v.Raw) <= len(body) && string(body[v.At:v.At+len(v.Raw)]) == v.Raw {
		return body[v.At : v.At+len(v.Raw) : v.At+len(v.Raw)]
	}
	return []byte(v.Raw)
}

// contentText joins the text of a content value: a string, or an array of
// parts/blocks with a "text" member. plain is false when the array holds
// anything but text (an image, a document), so that cutting leaves it be.
func contentText(v jsonscan.Value) (text string, plain bool) {
	switch {
	case v.IsString():
		return v.String(), true
	case v.IsArray():
		var b strings.Builder
		plain = true
		v.ForEach(func(_ string, _ int, p jsonscan.Value) bool {
			t := p.Get("text")
			if !t.IsString() {
				plain = false
				return true
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t.String())
			return true
		})
		return b.String(), plain
	}
	return "", false
}

// fields reads the members of an object in one pass: a Get per member
// would rescan a large item once each.
type fields struct {
	role, typ, content, toolCalls, functionCall, toolCallID, name, callID, output, arguments, input jsonscan.Value
}

func readFields(v jsonscan.Value) (f fields) {
	v.ForEach(func(k string, _ int, x jsonscan.Value) bool {
		switch k {
		case "role":
			f.role = x
		case "type":
			f.typ = x
		case "content":
			f.content = x
		case "tool_calls":
			f.toolCalls = x
		case "function_call":
			f.functionCall = x
		case "tool_call_id":
			f.toolCallID = x
		case "name":
			f.name = x
		case "call_id":
			f.callID = x
		case "output":
			f.output = x
		case "arguments":
			f.arguments = x
		case "input":
			f.input = x
		}
		return true
	})
	return f
}

func chatItem(v jsonscan.Value) item {
	f := readFields(v)
	role := f.role.String()
	it := item{role: role}
	text, plain := contentText(f.content)
	switch role {
	case "system", "developer":
		it.kind, it.text = kindSystem, text
	case "user":
		it.kind, it.text = kindUser, text
	case "assistant":
		it.kind, it.text = kindAssistant, text
		f.toolCalls.ForEach(func(_ string, _ int, tc jsonscan.Value) bool {
			it.calls = append(it.calls, call{
				id:   tc.Get("id").String(),
				name: tc.Get("function.name").String(),
				args: tc.Get("function.arguments").String(),
			})
			return true
		})
		if fc := f.functionCall; fc.Exists() {
			name := fc.Get("name").String()
			it.calls = append(it.calls, call{id: "fn:" + name, name: name, args: fc.Get("arguments").String()})
		}
	case "tool", "function":
		it.kind = kindTool
		id := f.toolCallID.String()
		if role == "function" {
			id = "fn:" + f.name.String()
		}
		r := result{id: id, text: text}
		if plain {
			r.path = "content"
		}
		it.results = []result{r}
	default:
		// An unknown role is kept in place, never dropped: we cannot tell
		// what pairs with it.
		it.kind = kindSystem
	}
	return it
}

func responsesItem(v jsonscan.Value) item {
	f := readFields(v)
	typ := f.typ.String()
	role := f.role.String()
	it := item{role: role}
	switch {
	case typ == "" || typ == "message":
		text, _ := contentText(f.content)
		it.text = text
		it.kind = messageKind(role)
	case strings.HasSuffix(typ, "_output"):
		it.kind, it.role = kindTool, "tool"
		text, plain := contentText(f.output)
		r := result{id: f.callID.String(), text: text}
		if plain && (typ == "function_call_output" || typ == "custom_tool_call_output") {
			r.path = "output"
		}
		it.results = []result{r}
	default:
		// function_call, custom_tool_call, reasoning, item_reference and
		// the built-in tool calls are all the model's side of a turn.
		it.kind, it.role = kindAssistant, "assistant"
		if id := f.callID.String(); id != "" {
			args := f.arguments.String()
			if args == "" {
				args = f.input.String()
			}
			it.calls = []call{{id: id, name: f.name.String(), args: args}}
		}
	}
	return it
}

func anthropicItem(v jsonscan.Value) item {
	f := readFields(v)
	role := f.role.String()
	it := item{role: role}
	content := f.content
	var text strings.Builder
	add := func(s string) {
		if s == "" {
			return
		}
		if text.Len() > 0 {
			text.WriteByte('\n')
		}
		text.WriteString(s)
	}
	if content.IsString() {
		add(content.String())
	}
	content.ForEach(func(_ string, k int, b jsonscan.Value) bool {
		bf := readBlock(b)
		switch bf.typ.String() {
		case "text":
			add(bf.text.String())
		case "tool_use", "server_tool_use", "mcp_tool_use":
			it.calls = append(it.calls, call{id: bf.id.String(), name: bf.name.String(), args: bf.input.Raw})
		case "tool_result":
			t, plain := contentText(bf.content)
			r := result{id: bf.toolUseID.String(), text: t}
			if plain {
				r.path = "content." + strconv.Itoa(k) + ".content"
			}
			it.results = append(it.results, r)
		}
		return true
	})
	it.text = text.String()
	switch {
	case role == "assistant":
		it.kind = kindAssistant
	case role == "user" && len(it.results) > 0:
		it.kind = kindTool
	case role == "user":
		it.kind = kindUser
	default:
		it.kind = kindSystem
	}
	return it
}

type blockFields struct {
	typ, text, id, name, input, toolUseID, content jsonscan.Value
}

func readBlock(b jsonscan.Value) (f blockFields) {
	b.ForEach(func(k string, _ int, x jsonscan.Value) bool {
		switch k {
		case "type":
			f.typ = x
		case "text":
			f.text = x
		case "id":
			f.id = x
		case "name":
			f.name = x
		case "input":
			f.input = x
		case "tool_use_id":
			f.toolUseID = x
		case "content":
			f.content = x
		}
		return true
	})
	return f
}
