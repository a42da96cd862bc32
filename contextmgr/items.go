package contextmgr

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// The fast item readers: an item's members are located by the reader as it
// validates and weighs them, and only the values that are used are decoded.

// readItems reads the items of the list at body[i]; it returns the list's
// end.
func (c *conv) readItems(r *reader, i int) int {
	c.items = c.items[:0]
	c.exact = true
	return r.array(i, func(v int) int {
		b := r.b
		w0, t := r.w, r.tools
		r.tools = false
		var it item
		var e int
		if b[v] == '{' {
			it, e = c.readItem(r, v)
		} else {
			e = r.value(v)
		}
		if r.bad {
			return e
		}
		if b[v] == '{' {
			it.w, it.tools = r.w-w0, r.tools
		} else {
			// scan weighs a lone string after whatever member name came
			// last in the body, and on its own after none: the parts no
			// longer add up to the body, so estimates assemble and scan.
			it = slowItem(c.api, jsonscan.Parse(string(b[v:e])))
			it.w, it.tools = scan(b[v:e], r.cheap)
			c.exact = false
		}
		it.raw, it.at = b[v:e:e], v
		r.tools = t || r.tools
		c.items = append(c.items, it)
		return e
	})
}

// readItem reads the item object at b[v].
func (c *conv) readItem(r *reader, v int) (it item, end int) {
	b := r.b
	var f spanFields
	good := true
	end = r.object(v, func(k []byte, esc bool, x int) int {
		good = good && !esc
		var sp *span
		switch string(k) {
		case "role":
			sp = &f.role
		case "type":
			sp = &f.typ
		case "content":
			f.dup = f.dup || f.content.ok()
			if c.api == wire.APIMessages && b[x] == '[' {
				// Anthropic blocks are read as the content is weighed.
				w0 := r.w
				f.blocks = c.readBlocks(r, x)
				f.content = span{s: x, e: f.blocks.end, w: r.w - w0}
				f.hasBlocks = true
				return f.blocks.end
			}
			f.hasBlocks = false
			sp = &f.content
		case "tool_calls":
			sp = &f.toolCalls
		case "function_call":
			sp = &f.functionCall
		case "tool_call_id":
			sp = &f.toolCallID
		case "name":
			sp = &f.name
		case "call_id":
			sp = &f.callID
		case "output":
			f.dup = f.dup || f.output.ok()
			sp = &f.output
		case "arguments":
			sp = &f.arguments
		case "input":
			sp = &f.input
		}
		if sp == nil {
			return r.value(x)
		}
		*sp = r.member(x)
		return sp.e
	})
	if r.bad {
		return it, end
	}
	if good {
		switch c.api {
		case wire.APIChat:
			it = c.chatItemFast(b, f)
		case wire.APIResponses:
			it = c.responsesItemFast(b, f)
		default:
			it, good = c.anthropicItemFast(b, f)
		}
		it.splice = !f.dup && (!f.hasBlocks || !f.blocks.dup)
	}
	if good && it.splice {
		for k := range it.results {
			if r := &it.results[k]; r.path != "" && r.ve == 0 {
				it.splice = false
			}
		}
	}
	if !good {
		it = slowItem(c.api, jsonscan.Parse(string(b[v:end])))
	}
	return it, end
}

// newResults returns n zero results from the conversation's backing store.
func (c *conv) newResults(n int) []result {
	k := len(c.resBuf)
	if cap(c.resBuf)-k < n {
		c.resBuf = make([]result, 0, max(2*cap(c.resBuf), n, 32))
		k = 0
	}
	c.resBuf = c.resBuf[:k+n]
	rs := c.resBuf[k : k+n : k+n]
	clear(rs) // the store is reused across requests
	return rs
}

// str returns what jsonscan.Value's String (gjson's) returns for the
// value at v.
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
	if b[v.s] == '"' && v.e-v.s >= 2 {
		return jsonscan.Unescape(b[v.s+1 : v.e-1])
	}
	return jsonscan.Parse(string(b[v.s:v.e])).String()
}

// lazyText reads a content value like contentText, leaving a plain string
// undecoded in r.
func lazyText(b []byte, v span, r *result) (plain bool) {
	if v.ok() && b[v.s] == '"' {
		r.src = b[v.s+1 : v.e-1]
		r.vs, r.ve, r.valW = v.s, v.e, v.w
		r.esc = bytes.IndexByte(r.src, '\\') >= 0
		r.lazy = true
		return true
	}
	if !v.ok() {
		return false
	}
	r.text, plain = contentText(jsonscan.Parse(string(b[v.s:v.e])))
	return plain
}

func eagerText(b []byte, v span) (string, bool) {
	if !v.ok() {
		return "", false
	}
	if b[v.s] == '"' {
		return str(b, v), true
	}
	return contentText(jsonscan.Parse(string(b[v.s:v.e])))
}

// spanFields are the members of an item the fast readers look at.
type spanFields struct {
	role, typ, content, toolCalls, functionCall, toolCallID, name, callID, output, arguments, input span
	blocks                                                                                          blocks
	hasBlocks                                                                                       bool // content is an Anthropic block array, read into blocks
	dup                                                                                             bool // content or output repeated
}

func (c *conv) chatItemFast(b []byte, f spanFields) item {
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
		k := len(c.callBuf)
		if f.toolCalls.ok() {
			jsonscan.Parse(string(b[f.toolCalls.s:f.toolCalls.e])).ForEach(func(_ string, _ int, tc jsonscan.Value) bool {
				c.callBuf = append(c.callBuf, call{
					id:   tc.Get("id").String(),
					name: tc.Get("function.name").String(),
					args: tc.Get("function.arguments").String(),
				})
				return true
			})
		}
		if f.functionCall.ok() {
			fc := jsonscan.Parse(string(b[f.functionCall.s:f.functionCall.e]))
			name := fc.Get("name").String()
			c.callBuf = append(c.callBuf, call{id: "fn:" + name, name: name, args: fc.Get("arguments").String()})
		}
		if n := len(c.callBuf); n > k {
			it.calls = c.callBuf[k:n:n]
		}
	case "tool", "function":
		it.kind = kindTool
		var id string
		if role == "function" {
			id = "fn:" + str(b, f.name)
		} else {
			id = str(b, f.toolCallID)
		}
		it.results = c.newResults(1)
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

// messageKind is the kind of a Responses API message item by its role:
// anything neither the user's nor the assistant's instructs (system,
// developer) and is never dropped.
func messageKind(role string) itemKind {
	switch role {
	case "user":
		return kindUser
	case "assistant":
		return kindAssistant
	}
	return kindSystem
}

func (c *conv) responsesItemFast(b []byte, f spanFields) item {
	typ := str(b, f.typ)
	role := str(b, f.role)
	it := item{role: role}
	switch {
	case typ == "" || typ == "message":
		it.text, _ = eagerText(b, f.content)
		it.kind = messageKind(role)
	case strings.HasSuffix(typ, "_output"):
		it.kind, it.role = kindTool, "tool"
		it.results = c.newResults(1)
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
			c.callBuf = append(c.callBuf, call{id: id, name: str(b, f.name), args: args})
			n := len(c.callBuf)
			it.calls = c.callBuf[n-1 : n : n]
		}
	}
	return it
}

// blocks is what an Anthropic content array says.
type blocks struct {
	text    string
	calls   []call
	results []result
	end     int  // end of the array
	ok      bool // every block could be read
	dup     bool // a block's content repeated
}

// readBlocks reads the content array at b[i].
func (c *conv) readBlocks(r *reader, i int) (bl blocks) {
	b := r.b
	bl.ok = true
	ck, rk := len(c.callBuf), len(c.resBuf)
	texts, first := 0, ""
	c.textBuf = c.textBuf[:0]
	next := 0
	bl.end = r.array(i, func(v int) int {
		k := next
		next++
		if !bl.ok || b[v] != '{' {
			return r.value(v)
		}
		var typ, txt, id, name, input, toolUseID, bc span
		e := r.object(v, func(key []byte, esc bool, x int) int {
			bl.ok = bl.ok && !esc
			var sp *span
			switch string(key) {
			case "type":
				sp = &typ
			case "text":
				sp = &txt
			case "id":
				sp = &id
			case "name":
				sp = &name
			case "input":
				sp = &input
			case "tool_use_id":
				sp = &toolUseID
			case "content":
				bl.dup = bl.dup || bc.ok()
				sp = &bc
			default:
				return r.value(x)
			}
			*sp = r.member(x)
			return sp.e
		})
		if r.bad || !bl.ok {
			return e
		}
		switch str(b, typ) {
		case "text":
			if s := str(b, txt); s != "" {
				if texts > 0 {
					c.textBuf = append(c.textBuf, '\n')
				}
				c.textBuf = append(c.textBuf, s...)
				if texts == 0 {
					first = s
				}
				texts++
			}
		case "tool_use", "server_tool_use", "mcp_tool_use":
			c.callBuf = append(c.callBuf, call{id: str(b, id), name: str(b, name), args: string(b[input.s:input.e])})
		case "tool_result":
			res := result{id: str(b, toolUseID)}
			if lazyText(b, bc, &res) {
				res.path = "content." + strconv.Itoa(k) + ".content"
			}
			c.resBuf = append(c.resBuf, res)
		}
		return e
	})
	switch texts {
	case 0:
	case 1:
		bl.text = first
	default:
		bl.text = string(c.textBuf)
	}
	if n := len(c.callBuf); n > ck {
		bl.calls = c.callBuf[ck:n:n]
	}
	if n := len(c.resBuf); n > rk {
		bl.results = c.resBuf[rk:n:n]
	}
	return bl
}

func (c *conv) anthropicItemFast(b []byte, f spanFields) (it item, ok bool) {
	content := f.content
	if content.ok() && b[content.s] == '{' {
		return it, false
	}
	role := str(b, f.role)
	it.role = role
	if content.ok() && b[content.s] == '"' {
		it.text = str(b, content)
	}
	if f.hasBlocks {
		bl := &f.blocks
		if !bl.ok {
			return item{}, false
		}
		it.text = bl.text
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
