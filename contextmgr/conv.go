package contextmgr

import (
	"bytes"
	"hash/crc64"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

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
	text string // the text, once materialised (see conv.textOf)
	// src is the raw contents of the JSON string holding the text while it
	// is not materialised (lazy): most tool outputs are only weighed and
	// hashed, never decoded into a string of their own.
	src  []byte
	esc  bool   // src holds escapes
	dec  []byte // src decoded, once it was
	lazy bool
	// path locates the result's content inside the item, for cutting and
	// deduplication; empty when the content is not plain text.
	path string

	// vs, ve locate the JSON string holding the text in the body, for
	// replacing it in place; ve is 0 when unknown.
	vs, ve int

	// Measures of the decoded text, computed once (measured).
	measured bool
	n, runes int
	sum      uint64 // crc64 of the text: textKey's value

	// Builds of one Rewrite: the replacement of the last build, and the
	// cut text once it is stable.
	lastRepl string
	cutRepl  string
	cutChars int
	cutOK    bool
}

type item struct {
	raw     []byte
	kind    itemKind
	role    string // the provider role (Anthropic alternation is on it)
	text    string // visible text, for the summary and pinned facts
	calls   []call
	results []result
	ident   uint64 // identity of the item's content, for the state's prefix hash
	identOK bool   // ident is computed (lazily, see conv.identOf)
	at      int    // offset of raw in the body
	// splice is set when the results' texts can be replaced by their
	// located bytes (results[k].vs, ve) rather than through sjson.
	splice bool
	// built is the item as the last build of the Rewrite replaced its
	// results, and builtW its weight.
	built  []byte
	builtW int64
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

	arena   []byte // decoded lazy texts
	scratch []byte // a text decoded only to be hashed
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
	default:
		return c, false
	}
	// One pass over the body: its members are located, and the list's
	// items read, as the reader goes.
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return parseConvSlow(api, body, c)
	}
	var list, prev span
	fast := true
	_, okm := eachMember(body, i, func(k []byte, v int) int {
		switch {
		case !list.ok() && string(k) == c.listPath:
			e := 0
			if body[v] == '[' {
				e, fast = c.readItems(body, v)
			} else {
				e = valueEnd(body, v)
			}
			list = span{v, e}
			return e
		case !prev.ok() && string(k) == "previous_response_id":
			prev = span{v, valueEnd(body, v)}
			return prev.e
		}
		return valueEnd(body, v)
	})
	if !okm || !fast {
		c.items = nil
		return parseConvSlow(api, body, c)
	}
	if api == wire.APIResponses {
		c.noDrop = str(body, prev) != ""
	}
	if !list.ok() || body[list.s] != '[' {
		return c, false
	}
	c.listStart, c.listEnd = list.s, list.e
	c.head = headEnd(c.items)
	return c, true
}

// readItems reads the items of the list at body[i]; it returns the list's
// end.
func (c *conv) readItems(body []byte, i int) (end int, ok bool) {
	c.items = make([]item, 0, 64)
	ok = true
	end = eachElement(body, i, func(v int) int {
		if !ok {
			return valueEnd(body, v)
		}
		var it item
		e := 0
		good := false
		if body[v] == '{' {
			it, e, good = fastItem(c.api, body, v)
		}
		if good && it.splice {
			for k := range it.results {
				if r := &it.results[k]; r.path != "" && r.ve == 0 {
					it.splice = false
				}
			}
		}
		if !good {
			e = valueEnd(body, v)
			g := gjson.ParseBytes(body[v:e])
			switch c.api {
			case wire.APIChat:
				it = chatItem(g)
			case wire.APIResponses:
				it = responsesItem(g)
			default:
				it = anthropicItem(g)
			}
		}
		it.raw = body[v:e:e]
		it.at = v
		c.items = append(c.items, it)
		return e
	})
	return end, ok
}

// str returns what gjson's String returns for the value at v.
func str(b []byte, v span) string {
	if !v.ok() {
		return ""
	}
	if b[v.s] == '"' && v.e-v.s >= 2 && b[v.e-1] == '"' && bytes.IndexByte(b[v.s+1:v.e-1], '\\') < 0 {
		raw := b[v.s+1 : v.e-1]
		// The envelope's words, without an allocation each.
		switch string(raw) {
		case "user":
			return "user"
		case "assistant":
			return "assistant"
		case "system":
			return "system"
		case "developer":
			return "developer"
		case "tool":
			return "tool"
		case "message":
			return "message"
		case "text":
			return "text"
		case "function_call":
			return "function_call"
		case "function_call_output":
			return "function_call_output"
		case "reasoning":
			return "reasoning"
		case "tool_use":
			return "tool_use"
		case "tool_result":
			return "tool_result"
		}
		return string(raw)
	}
	return gjson.ParseBytes(b[v.s:v.e]).String()
}

// lazyText reads a content value like contentText, leaving a plain string
// undecoded in r.
func lazyText(b []byte, v span, r *result) (plain bool) {
	if v.ok() && b[v.s] == '"' {
		r.src = b[v.s+1 : v.e-1]
		r.vs, r.ve = v.s, v.e
		r.esc = bytes.IndexByte(r.src, '\\') >= 0
		r.lazy = true
		return true
	}
	if !v.ok() {
		return false
	}
	r.text, plain = contentText(gjson.ParseBytes(b[v.s:v.e]))
	return plain
}

func eagerText(b []byte, v span) (string, bool) {
	if !v.ok() {
		return "", false
	}
	if b[v.s] == '"' {
		return str(b, v), true
	}
	return contentText(gjson.ParseBytes(b[v.s:v.e]))
}

type spanFields struct {
	role, typ, content, toolCalls, functionCall, toolCallID, name, callID, output, arguments, input span
	blocks                                                                                          *blocks
	dup                                                                                             bool // content or output repeated
}

func readSpans(api wire.API, b []byte, i int) (f spanFields, end int, ok bool) {
	end, ok = eachMember(b, i, func(k []byte, v int) int {
		var x *span
		switch string(k) {
		case "role":
			x = &f.role
		case "type":
			x = &f.typ
		case "content":
			f.dup = f.dup || f.content.ok()
			if api == wire.APIMessages && b[v] == '[' {
				// Anthropic blocks are read as the content is skipped.
				bl, e := readBlocks(b, v)
				f.content, f.blocks = span{v, e}, bl
				return e
			}
			f.blocks = nil
			x = &f.content
		case "tool_calls":
			x = &f.toolCalls
		case "function_call":
			x = &f.functionCall
		case "tool_call_id":
			x = &f.toolCallID
		case "name":
			x = &f.name
		case "call_id":
			x = &f.callID
		case "output":
			f.dup = f.dup || f.output.ok()
			x = &f.output
		case "arguments":
			x = &f.arguments
		case "input":
			x = &f.input
		}
		e := valueEnd(b, v)
		if x != nil {
			*x = span{v, e}
		}
		return e
	})
	return f, end, ok
}

// fastItem reads the item object at b[i] without gjson; ok is false for
// the shapes it leaves to the gjson readers.
func fastItem(api wire.API, b []byte, i int) (it item, end int, ok bool) {
	f, end, ok := readSpans(api, b, i)
	if !ok {
		return it, 0, false
	}
	switch api {
	case wire.APIChat:
		it = chatItemFast(b, f)
	case wire.APIResponses:
		it = responsesItemFast(b, f)
	default:
		it, ok = anthropicItemFast(b, f)
	}
	it.splice = !f.dup && (f.blocks == nil || !f.blocks.dup)
	return it, end, ok
}

func chatItemFast(b []byte, f spanFields) item {
	role := str(b, f.role)
	it := item{role: role}
	switch role {
	case "system", "developer":
		it.kind = kindSystem
		it.text, _ = eagerText(b, f.content)
	case "user":
		it.kind = kindUser
		it.text, _ = eagerText(b, f.content)
	case "assistant":
		it.kind = kindAssistant
		it.text, _ = eagerText(b, f.content)
		if f.toolCalls.ok() {
			gjson.ParseBytes(b[f.toolCalls.s:f.toolCalls.e]).ForEach(func(_, tc gjson.Result) bool {
				it.calls = append(it.calls, call{
					id:   tc.Get("id").String(),
					name: tc.Get("function.name").String(),
					args: tc.Get("function.arguments").String(),
				})
				return true
			})
		}
		if f.functionCall.ok() {
			fc := gjson.ParseBytes(b[f.functionCall.s:f.functionCall.e])
			name := fc.Get("name").String()
			it.calls = append(it.calls, call{id: "fn:" + name, name: name, args: fc.Get("arguments").String()})
		}
	case "tool", "function":
		it.kind = kindTool
		var id string
		if role == "function" {
			id = "fn:" + str(b, f.name)
		} else {
			id = str(b, f.toolCallID)
		}
		it.results = make([]result, 1)
		r := &it.results[0]
		r.id = id
		if lazyText(b, f.content, r) {
			r.path = "content"
		}
	default:
		it.kind = kindSystem
	}
	return it
}

func responsesItemFast(b []byte, f spanFields) item {
	typ := str(b, f.typ)
	role := str(b, f.role)
	it := item{role: role}
	switch {
	case typ == "" || typ == "message":
		it.text, _ = eagerText(b, f.content)
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
		it.results = make([]result, 1)
		r := &it.results[0]
		r.id = str(b, f.callID)
		if lazyText(b, f.output, r) && (typ == "function_call_output" || typ == "custom_tool_call_output") {
			r.path = "output"
		}
	default:
		it.kind, it.role = kindAssistant, "assistant"
		if id := str(b, f.callID); id != "" {
			args := str(b, f.arguments)
			if args == "" {
				args = str(b, f.input)
			}
			it.calls = []call{{id: id, name: str(b, f.name), args: args}}
		}
	}
	return it
}

// blocks is what an Anthropic content array says.
type blocks struct {
	text    strings.Builder
	calls   []call
	results []result
	ok      bool
	dup     bool // a block's content repeated
}

func (bl *blocks) add(s string) {
	if s == "" {
		return
	}
	if bl.text.Len() > 0 {
		bl.text.WriteByte('\n')
	}
	bl.text.WriteString(s)
}

// readBlocks reads the content array at b[i]; it returns its end.
func readBlocks(b []byte, i int) (*blocks, int) {
	bl := &blocks{ok: true}
	k := 0
	end := eachElement(b, i, func(v int) int {
		defer func() { k++ }()
		if !bl.ok || b[v] != '{' {
			return valueEnd(b, v)
		}
		var typ, txt, id, name, input, toolUseID, bc span
		e, ok := eachMember(b, v, func(key []byte, x int) int {
			xe := valueEnd(b, x)
			sp := span{x, xe}
			switch string(key) {
			case "type":
				typ = sp
			case "text":
				txt = sp
			case "id":
				id = sp
			case "name":
				name = sp
			case "input":
				input = sp
			case "tool_use_id":
				toolUseID = sp
			case "content":
				bl.dup = bl.dup || bc.ok()
				bc = sp
			}
			return xe
		})
		if !ok {
			bl.ok = false
			return valueEnd(b, v)
		}
		switch str(b, typ) {
		case "text":
			bl.add(str(b, txt))
		case "tool_use", "server_tool_use", "mcp_tool_use":
			bl.calls = append(bl.calls, call{id: str(b, id), name: str(b, name), args: string(b[input.s:input.e])})
		case "tool_result":
			r := result{id: str(b, toolUseID)}
			if lazyText(b, bc, &r) {
				r.path = "content." + strconv.Itoa(k) + ".content"
			}
			bl.results = append(bl.results, r)
		}
		return e
	})
	return bl, end
}

func anthropicItemFast(b []byte, f spanFields) (it item, ok bool) {
	content := f.content
	if content.ok() && b[content.s] == '{' {
		return it, false
	}
	role := str(b, f.role)
	it.role = role
	if content.ok() && b[content.s] == '"' {
		it.text = str(b, content)
	}
	if bl := f.blocks; bl != nil {
		if !bl.ok {
			return item{}, false
		}
		it.text = bl.text.String()
		it.calls, it.results = bl.calls, bl.results
	}
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
	return it, true
}

// parseConvSlow is the gjson reader, for bodies topLevel cannot read.
func parseConvSlow(api wire.API, body []byte, c conv) (conv, bool) {
	if api == wire.APIResponses {
		c.noDrop = gjson.GetBytes(body, "previous_response_id").String() != ""
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

// decoded returns r's text as bytes. It is only ever read.
func (c *conv) decoded(r *result) []byte {
	if !r.lazy {
		return unsafe.Slice(unsafe.StringData(r.text), len(r.text))
	}
	if !r.esc {
		return r.src
	}
	if r.dec == nil {
		// Decoded once into the conversation's arena: a text is weighed,
		// hashed and cut from the same bytes.
		if cap(c.arena)-len(c.arena) < len(r.src) {
			c.arena = make([]byte, 0, max(len(r.src), 64<<10))
		}
		n := len(c.arena)
		c.arena = appendUnescaped(c.arena, r.src)
		r.dec = c.arena[n:len(c.arena):len(c.arena)]
	}
	return r.dec
}

// textOf returns r's text, materialising it once.
func (c *conv) textOf(r *result) string {
	if r.lazy {
		r.text = string(c.decoded(r))
		r.lazy, r.src, r.dec = false, nil, nil
	}
	return r.text
}

// rawLen bounds the length of r's text in bytes without decoding it:
// escapes only shrink when decoded.
func (r *result) rawLen() int {
	if r.lazy {
		return len(r.src) // escapes only shrink when decoded
	}
	return len(r.text)
}

// measure computes r's length, rune count and hash once.
func (c *conv) measure(r *result) {
	if r.measured {
		return
	}
	d := c.decoded(r)
	c.setMeasures(r, d)
}

func (c *conv) setMeasures(r *result, d []byte) {
	r.n = len(d)
	r.runes = utf8.RuneCount(d)
	r.sum = crc64.Update(0, crcTable, d)
	r.measured = true
}

// identOf returns the identity of item i: a hash of what it says, not how
// it is spelt, so that a client that re-serialises its history differently
// still matches the state's prefix.
func (c *conv) identOf(i int) uint64 {
	it := &c.items[i]
	if it.identOK {
		return it.ident
	}
	var h uint64
	w := func(s []byte) {
		h = crc64.Update(h, crcTable, s)
		h = crc64.Update(h, crcTable, zero[:])
	}
	ws := func(s string) { w(unsafe.Slice(unsafe.StringData(s), len(s))) }
	w([]byte{byte('0' + it.kind)})
	ws(it.role)
	ws(it.text)
	for _, cl := range it.calls {
		ws(cl.id)
		ws(cl.name)
		ws(cl.args)
	}
	for k := range it.results {
		r := &it.results[k]
		ws(r.id)
		if r.lazy && r.esc && r.dec == nil {
			// Hashed only: decode into the scratch buffer, not the arena.
			c.scratch = appendUnescaped(c.scratch[:0], r.src)
			w(c.scratch)
			continue
		}
		w(c.decoded(r))
	}
	if it.text == "" && len(it.calls) == 0 && len(it.results) == 0 {
		h = crc64.Update(h, crcTable, it.raw)
	}
	it.ident, it.identOK = h, true
	return h
}

var zero [1]byte

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
