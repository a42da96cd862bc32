package contextmgr

import (
	"hash/crc64"
	"unsafe"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
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
	// replacing it in place; ve is 0 when unknown. valW is the weight scan
	// gives that string as a value.
	vs, ve int
	valW   int64

	// Measures of the decoded text, computed once (measured).
	measured bool
	n, runes int
	sum      uint64 // crc64 of the text: textKey's value

	// Plans of one Rewrite. lastRepl is the replacement the last plan
	// decided for the text: "" for none, a reference to an identical
	// result, or for a cut cutKey. A cut keeps the decoded text's head
	// [0, cutH) and tail [cutT, n) around cutNote; cutOK is set once it is
	// stable (its handle known).
	lastRepl   string
	cutKey     string
	cutNote    string
	cutH, cutT int
	cutChars   int
	cutOK      bool
	// The replacement as a JSON string (enc, for encFor), and the weight
	// scan gives it as a value (encW, for wFor).
	enc    []byte
	encFor string
	encW   int64
	wFor   string
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
	// w is the item's weight as the agent sent it (scan of raw), and tools
	// whether it offers tools, as scan says.
	w     int64
	tools bool
	// built is the item as the last plan of the Rewrite replaced its
	// results through sjson (an item that cannot be spliced), builtW and
	// builtTools what scan says of it.
	built      []byte
	builtW     int64
	builtTools bool
	// replaced: the last plan replaced some of the item's results; stale:
	// a replacement changed since built was made.
	replaced, stale bool
}

// conv is a request read into items.
type conv struct {
	api      wire.API
	listPath string // "messages" or "input"
	// listStart and listEnd locate the list's bytes in the body; listEnd
	// is 0 when the slow reader could not say where it is.
	listStart, listEnd int
	items              []item
	head               int  // items [0, head) are the protected head: system prompt and task
	noDrop             bool // Responses continued by previous_response_id: calls live server-side

	// exact is set when the reader weighed every item and the envelope in
	// the body's own order: estimates of a rewritten body are then sums of
	// the parts' weights, with no need to assemble and scan it. It is unset
	// for the slow reader and for lists holding anything but objects.
	exact    bool
	envW     int64 // weight of the body outside the list
	envTools bool  // the body offers tools outside the list

	arena []byte // decoded lazy texts
	// Backing storage of the items' calls and results, and a buffer to
	// join block texts: one allocation per request instead of per item.
	callBuf []call
	resBuf  []result
	textBuf []byte
	// Pairing of calls and results by id (see plan.index), kept with the
	// reading for reuse.
	callAt, resultAt map[string]int
}

// read reads body in one pass: it validates it, weighs it (est is
// Estimate(api, body) when valid) and reads its item list. ok is false when
// the body has no list to rewrite (a Responses input given as a string, an
// unknown API).
func (c *conv) read(api wire.API, body []byte) (est int64, valid, ok bool) {
	c.api = api
	switch api {
	case wire.APIChat, wire.APIMessages:
		c.listPath = "messages"
	case wire.APIResponses:
		c.listPath = "input"
	}
	r := reader{b: body, text: unsafe.String(unsafe.SliceData(body), len(body)), cheap: api != wire.APIMessages}
	var list, prev span
	var listTools, escKey bool
	i := skipWS(body, 0)
	switch {
	case i >= len(body):
		r.fail()
	case body[i] == '{' && c.listPath != "":
		i = r.object(i, func(k []byte, esc bool, v int) int {
			escKey = escKey || esc
			switch {
			case !list.ok() && string(k) == c.listPath:
				t := r.tools
				r.tools = false
				w0 := r.w
				var e int
				if body[v] == '[' {
					e = c.readItems(&r, v)
				} else {
					e = r.value(v)
				}
				list = span{s: v, e: e, w: r.w - w0}
				listTools, r.tools = r.tools, t
				return e
			case !prev.ok() && string(k) == "previous_response_id":
				prev = r.member(v)
				return prev.e
			}
			return r.value(v)
		})
	default:
		i = r.value(i)
	}
	if !r.bad && skipWS(body, i) != len(body) {
		r.fail()
	}
	if r.bad {
		return 0, false, false
	}
	est = finish(api, r.w, r.tools || listTools)
	if c.listPath == "" || body[skipWS(body, 0)] != '{' {
		return est, true, false
	}
	if escKey {
		// A member name with an escape: upstreams read names decoded,
		// and so does the slow reader, which decides what the request
		// says.
		c.items = c.items[:0]
		return est, true, parseConvSlow(api, body, c)
	}
	if api == wire.APIResponses {
		c.noDrop = str(body, prev) != ""
	}
	if !list.ok() || body[list.s] != '[' {
		return est, true, false
	}
	c.listStart, c.listEnd = list.s, list.e
	c.head = headEnd(c.items)
	c.envW, c.envTools = r.w-list.w, r.tools
	return est, true, true
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
			c.arena = make([]byte, 0, max(len(r.src), 2*cap(c.arena), 64<<10))
		}
		n := len(c.arena)
		c.arena = jsonscan.AppendUnescaped(c.arena, r.src)
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

// viewOf returns r's text without copying it: the string aliases the body
// or the arena, so it must not outlive the Rewrite.
func (c *conv) viewOf(r *result) string {
	d := c.decoded(r)
	return unsafe.String(unsafe.SliceData(d), len(d))
}

// rawLen bounds the length of r's text in bytes without decoding it:
// escapes only shrink when decoded.
func (r *result) rawLen() int {
	if r.lazy {
		return len(r.src)
	}
	return len(r.text)
}

// measure computes r's length, rune count and hash once.
func (c *conv) measure(r *result) {
	if r.measured {
		return
	}
	d := c.decoded(r)
	r.n = len(d)
	r.runes = runeCount(d)
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
		// The text's own hash (measured for deduplication and blob keys
		// anyway) is spliced into the stream rather than the text hashed
		// again: tool output is most of what a prefix holds.
		c.measure(r)
		h = crcAppend(h, r.sum, r.n)
		h = crc64.Update(h, crcTable, zero[:])
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
