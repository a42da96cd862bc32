package contextmgr

import (
	"hash/crc64"
	"strconv"
	"strings"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/gjson"
)

// The three wire formats are read into one neutral list of items, so that
// turn grouping, pairing and dropping are written once. An item keeps its
// raw bytes: what is kept is forwarded as the agent sent it, which is what
// keeps the prompt-cache prefix byte-stable.

type itemKind uint8

const (
	kindSystem    itemKind = iota // system / developer: never dropped
	kindUser                      // a user message with its own text: a turn of its own
	kindAssistant                 // assistant text, tool calls, reasoning and other output items
	kindTool                      // tool results (chat tool, function_call_output, user tool_result)
)

type call struct {
	id, name, args string
}

type result struct {
	id   string
	text string
	// path locates the result's content inside the item, for cutting and
	// deduplication; empty when the content is not plain text.
	path string
}

type item struct {
	raw     []byte
	kind    itemKind
	role    string // the provider role (Anthropic alternation is on it)
	text    string // visible text, for the summary and pinned facts
	calls   []call
	results []result
	ident   uint64 // identity of the item's content, for the state's prefix hash
}

// conv is a request read into items.
type conv struct {
	api      wire.API
	listPath string // "messages" or "input"
	// listStart and listEnd locate the list's bytes in the body; listEnd
	// is 0 when gjson could not say where it is.
	listStart, listEnd int
	items              []item
	head               int  // items [0, head) are the protected head: system prompt and task
	noDrop             bool // Responses continued by previous_response_id: calls live server-side
}

// parseConv reads body's item list. ok is false when the body has no list
// to rewrite (a Responses input given as a string, an unknown API).
func parseConv(api wire.API, body []byte) (c conv, ok bool) {
	c.api = api
	switch api {
	case wire.APIChat, wire.APIMessages:
		c.listPath = "messages"
	case wire.APIResponses:
		c.listPath = "input"
		c.noDrop = gjson.GetBytes(body, "previous_response_id").String() != ""
	default:
		return c, false
	}
	list := gjson.GetBytes(body, c.listPath)
	if !list.IsArray() {
		return c, false
	}
	if list.Index > 0 && list.Index+len(list.Raw) <= len(body) {
		c.listStart, c.listEnd = list.Index, list.Index+len(list.Raw)
	}
	list.ForEach(func(_, v gjson.Result) bool {
		var it item
		switch api {
		case wire.APIChat:
			it = chatItem(v)
		case wire.APIResponses:
			it = responsesItem(v)
		default:
			it = anthropicItem(v)
		}
		it.raw = rawOf(body, v)
		it.ident = identify(&it)
		c.items = append(c.items, it)
		return true
	})
	c.head = headEnd(c.items)
	return c, true
}

// rawOf returns v's bytes, aliasing body when gjson located them there. The
// slice is only ever read.
func rawOf(body []byte, v gjson.Result) []byte {
	if v.Index > 0 && v.Index+len(v.Raw) <= len(body) && string(body[v.Index:v.Index+len(v.Raw)]) == v.Raw {
		return body[v.Index : v.Index+len(v.Raw) : v.Index+len(v.Raw)]
	}
	return []byte(v.Raw)
}

// headEnd returns the end of the protected head: everything up to and
// including the first user message (the task).
func headEnd(items []item) int {
	for i, it := range items {
		if it.kind == kindUser {
			return i + 1
		}
	}
	n := 0
	for n < len(items) && items[n].kind == kindSystem {
		n++
	}
	return n
}

// contentText joins the text of a content value: a string, or an array of
// parts/blocks with a "text" member. plain is false when the array holds
// anything but text (an image, a document), so that cutting leaves it be.
func contentText(v gjson.Result) (text string, plain bool) {
	switch {
	case v.Type == gjson.String:
		return v.String(), true
	case v.IsArray():
		var b strings.Builder
		plain = true
		v.ForEach(func(_, p gjson.Result) bool {
			t := p.Get("text")
			if t.Type != gjson.String {
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

// fields reads the members of an object in one pass: gjson's Get would
// rescan a large item once per member.
type fields struct {
	role, typ, content, toolCalls, functionCall, toolCallID, name, callID, output, arguments, input gjson.Result
}

func readFields(v gjson.Result) (f fields) {
	v.ForEach(func(k, x gjson.Result) bool {
		switch k.Str {
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

func chatItem(v gjson.Result) item {
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
		f.toolCalls.ForEach(func(_, tc gjson.Result) bool {
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

func responsesItem(v gjson.Result) item {
	f := readFields(v)
	typ := f.typ.String()
	role := f.role.String()
	it := item{role: role}
	switch {
	case typ == "" || typ == "message":
		text, _ := contentText(f.content)
		it.text = text
		switch role {
		case "user":
			it.kind = kindUser
		case "assistant":
			it.kind = kindAssistant
		default:
			it.kind = kindSystem
		}
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

func anthropicItem(v gjson.Result) item {
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
	if content.Type == gjson.String {
		add(content.String())
	}
	content.ForEach(func(k, b gjson.Result) bool {
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
				r.path = "content." + strconv.Itoa(int(k.Int())) + ".content"
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
	typ, text, id, name, input, toolUseID, content gjson.Result
}

func readBlock(b gjson.Result) (f blockFields) {
	b.ForEach(func(k, x gjson.Result) bool {
		switch k.Str {
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

// identify hashes what an item says, not how it is spelt, so that a client
// that re-serialises its history differently still matches the state's
// prefix.
func identify(it *item) uint64 {
	h := crc64.New(crcTable)
	w := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	w(string(rune('0' + it.kind)))
	w(it.role)
	w(it.text)
	for _, c := range it.calls {
		w(c.id)
		w(c.name)
		w(c.args)
	}
	for _, r := range it.results {
		w(r.id)
		w(r.text)
	}
	if it.text == "" && len(it.calls) == 0 && len(it.results) == 0 {
		h.Write(it.raw)
	}
	return h.Sum64()
}

// turn is a unit the rewrite drops whole: a user message, or the model's
// items with the tool results that answer them.
type turn struct {
	start, end int  // item indexes [start, end)
	sticky     bool // a system item: kept in place, never dropped
}

// turns groups items [from, len) into turns.
func turnsOf(items []item, from int) []turn {
	var ts []turn
	for i := from; i < len(items); i++ {
		it := items[i]
		newTurn := len(ts) == 0 || ts[len(ts)-1].sticky
		switch it.kind {
		case kindSystem:
			ts = append(ts, turn{start: i, end: i + 1, sticky: true})
			continue
		case kindUser:
			newTurn = true
		case kindAssistant:
			if i > from && items[i-1].kind != kindAssistant {
				newTurn = true
			}
		}
		if newTurn {
			ts = append(ts, turn{start: i, end: i + 1})
		} else {
			ts[len(ts)-1].end = i + 1
		}
	}
	return ts
}
