package contextmgr

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// plan holds one Rewrite's reading of the request: per-item weights for
// choosing the cut, pairing indexes for validating it, and the builder of
// the forwarded body.
type plan struct {
	rw   *Rewriter
	c    *conv
	st   *State
	body []byte
	rep  *Report

	w        []int64 // planned weight of each item, cut applied
	rawW     []int64 // weight of each item as the agent sent it
	dropW    []int64 // dropW[i]: weight of the droppable items [head, i)
	total    int64   // weight of the whole request as planned
	tools    bool    // the request offers tools
	turns    []turn  // turns after the head
	starts   map[int]bool
	callAt   map[string]int // call id → index of the item that made it
	resultAt map[string]int // call id → index of the last item answering it
}

// noteWeight reserves the cut note's weight (a sentence and a handle).
const noteWeight = 40 * weightScale

func (p *plan) index() {
	items := p.c.items
	p.callAt = make(map[string]int, len(items))
	p.resultAt = make(map[string]int, len(items))
	for i := range items {
		it := &items[i]
		for k := range it.results {
			p.resultAt[it.results[k].id] = i
		}
		for _, c := range it.calls {
			p.callAt[c.id] = i
		}
	}
	p.turns = turnsOf(items, p.c.head)
	p.starts = make(map[int]bool, len(p.turns))
	for _, t := range p.turns {
		if !t.sticky {
			p.starts[t.start] = true
		}
	}
}

// rawWeight returns the weight of item i as the agent sent it.
func (p *plan) rawWeight(i int) int64 {
	if p.rawW == nil {
		p.rawW = make([]int64, len(p.c.items))
		for j := range p.rawW {
			p.rawW[j] = -1
		}
	}
	if p.rawW[i] < 0 {
		p.rawW[i], _ = scan(p.c.items[i].raw, p.c.api != wire.APIMessages)
	}
	return p.rawW[i]
}

// weigh computes the planning weights, on the first plan of a cut.
func (p *plan) weights() {
	if p.w != nil {
		return
	}
	c := p.c
	items := c.items
	cheap := c.api != wire.APIMessages
	p.w = make([]int64, len(items))
	p.dropW = make([]int64, len(items)+1)
	var itemsW int64
	limit := p.rw.inlineLimit()
	for i := range items {
		it := &items[i]
		w := p.rawWeight(i)
		itemsW += w
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" || r.rawLen() <= limit {
				continue
			}
			d := c.decoded(r)
			if len(d) <= limit {
				continue
			}
			// Planning only: bytes stand in for characters here, the build
			// cuts on characters.
			h, t := min(p.rw.head(), len(d)), max(len(d)-p.rw.tail(), 0)
			if h < t {
				w += noteWeight - weigh(d[h:t])
			}
		}
		p.w[i] = w
	}
	for i := range items {
		p.dropW[i+1] = p.dropW[i]
		if i >= c.head && items[i].kind != kindSystem {
			p.dropW[i+1] += p.w[i]
		}
	}
	// The envelope is weighed apart from the items rather than the whole
	// body again: one pass over the bytes instead of two.
	var baseW int64
	if c.listEnd > 0 {
		baseW, p.tools = p.envelope(p.body, c.listStart, c.listEnd)
	} else {
		bodyW, tools := scan(p.body, cheap)
		baseW, p.tools = bodyW-itemsW, tools
	}
	p.total = baseW
	for _, w := range p.w {
		p.total += w
	}
}

// envelope weighs b outside the list at [ls, le).
func (p *plan) envelope(b []byte, ls, le int) (int64, bool) {
	cheap := p.c.api != wire.APIMessages
	w1, t1 := scan(b[:ls], cheap)
	w2, t2 := scan(b[le:], cheap)
	return w1 + w2, t1 || t2
}

// valid reports whether dropping the droppable items [head, cut) leaves a
// request the provider accepts.
func (p *plan) valid(cut int) bool {
	c := p.c
	if cut == c.head {
		return true
	}
	if c.noDrop || !p.starts[cut] {
		return false
	}
	if c.api == wire.APIMessages {
		// Strict alternation: the first kept message must not repeat the
		// role of the message before it.
		prev := ""
		for i := cut - 1; i >= 0; i-- {
			if i < c.head || c.items[i].kind == kindSystem {
				prev = c.items[i].role
				break
			}
		}
		if prev == c.items[cut].role {
			return false
		}
	}
	// Never separate a tool result from its call.
	for i := c.head; i < cut; i++ {
		it := c.items[i]
		if it.kind == kindSystem {
			continue
		}
		for _, cl := range it.calls {
			if j, ok := p.resultAt[cl.id]; ok && j >= cut {
				return false
			}
		}
		for _, r := range it.results {
			if j, ok := p.callAt[r.id]; ok && j >= cut {
				return false
			}
		}
	}
	return true
}

// candidates returns the valid cuts after c0, the last turn always kept.
func (p *plan) candidates(c0 int) []int {
	last := -1
	for _, t := range p.turns {
		if !t.sticky {
			last = t.start
		}
	}
	var out []int
	for _, t := range p.turns {
		if t.sticky || t.start <= c0 || t.start > last {
			continue
		}
		if p.valid(t.start) {
			out = append(out, t.start)
		}
	}
	return out
}

// keepLimit returns the largest cut that keeps the last KeepTurns turns.
func (p *plan) keepLimit() int {
	k := p.rw.keepTurns()
	for i := len(p.turns) - 1; i >= 0; i-- {
		if p.turns[i].sticky {
			continue
		}
		k--
		if k == 0 {
			return p.turns[i].start
		}
	}
	return p.c.head
}

// summaryReserve is the weight planned for what a compression adds to the
// system segment (a new summary part and its facts).
const summaryReserve = (newSummaryMax*300 + 100*weightScale)

// planned estimates the tokens of the request cut at cut.
func (p *plan) planned(cut int) int64 {
	p.weights()
	seg := weigh([]byte(segment(p.st))) + summaryReserve
	return finish(p.c.api, p.total-p.dropW[cut]+seg, p.tools)
}

// cutBounds returns the byte offsets of the kept head's end and the kept
// tail's start of a text of n runes to cut.
func (p *plan) cutBounds(text []byte, n int) (headEnd, tailStart int) {
	head, tail := p.rw.head(), p.rw.tail()
	if head+tail > n {
		head, tail = n/2, 0
	}
	if n == len(text) {
		// One byte per rune.
		return head, n - tail
	}
	headEnd = runeOffset(text, 0, head)
	tailStart = runeOffset(text, headEnd, n-head-tail)
	return headEnd, tailStart
}

// runeOffset returns the byte offset reached after skipping k runes of s
// from byte offset from.
func runeOffset(s []byte, from, k int) int {
	i := from
	for ; k > 0 && i < len(s); k-- {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, size := utf8.DecodeRune(s[i:])
		i += size
	}
	return i
}

// cutText returns the head and tail of a long tool output with a line
// naming the handle of the full text.
func (p *plan) cutText(r *result) string {
	if r.cutOK {
		p.rep.Cut++
		p.rep.CutChars += int64(r.cutChars)
		return r.cutRepl
	}
	c := p.c
	c.measure(r)
	key := hexKey(r.sum)
	handle := p.st.Blobs[key]
	if handle == "" && p.rw.Blob != nil {
		handle = p.rw.Blob(c.textOf(r))
		if handle != "" {
			if p.st.Blobs == nil {
				p.st.Blobs = map[string]string{}
			}
			p.st.Blobs[key] = handle
			p.rep.Blobs = append(p.rep.Blobs, handle)
		}
	}
	text := c.decoded(r)
	h, t := p.cutBounds(text, r.runes)
	total := r.runes
	var cut int
	if total == len(text) {
		// One byte per rune: offsets are counts.
		cut = t - h
	} else {
		cut = total - utf8.RuneCount(text[:h]) - utf8.RuneCount(text[t:])
	}
	p.rep.Cut++
	p.rep.CutChars += int64(cut)
	var b strings.Builder
	b.Grow(h + len(text) - t + 160)
	b.Write(text[:h])
	b.WriteString("\n\n[haltline: ")
	b.WriteString(strconv.Itoa(cut))
	b.WriteString(" of ")
	b.WriteString(strconv.Itoa(total))
	b.WriteString(" characters of this tool output were cut here; ")
	if handle != "" {
		b.WriteString("the full text is kept as handle ")
		b.WriteString(handle)
		b.WriteString("]\n\n")
	} else {
		b.WriteString("the full text was not kept]\n\n")
	}
	b.Write(text[t:])
	if handle != "" || p.rw.Blob == nil {
		// Later builds of this Rewrite cut it into the same text.
		r.cutRepl, r.cutChars, r.cutOK = b.String(), cut, true
	}
	return b.String()
}

// build renders the request with the droppable items [head, cut) removed,
// tool outputs cut and deduplicated, and the state's segment in the system
// part. It returns the body and its estimate.
func (p *plan) build(cut int) ([]byte, int64, error) {
	c, st := p.c, p.st
	p.rep.Cut, p.rep.CutChars, p.rep.Deduped = 0, 0, 0
	limit, dmin := p.rw.inlineLimit(), p.rw.dedupeMin()
	seen := make(map[uint64]string, len(c.items))
	parts := make([][]byte, 0, len(c.items)+1)
	var partsW int64
	for i := range c.items {
		it := &c.items[i]
		if i >= c.head && i < cut && it.kind != kindSystem {
			continue
		}
		raw := it.raw
		changed, any := false, false
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" {
				continue
			}
			repl := ""
			if r.rawLen() >= dmin {
				c.measure(r)
				if r.n >= dmin {
					if first, ok := seen[r.sum]; ok {
						repl = "[same result as call " + first + "]"
						p.rep.Deduped++
					} else {
						seen[r.sum] = r.id
					}
				}
			}
			if repl == "" && r.rawLen() > limit {
				c.measure(r)
				if r.n > limit && r.runes > limit {
					repl = p.cutText(r)
				}
			}
			changed = changed || repl != r.lastRepl
			any = any || repl != ""
			r.lastRepl = repl
		}
		switch {
		case !any:
		case !changed && it.built != nil:
			// The same replacements as on the previous build of this
			// Rewrite: the same bytes.
			raw = it.built
		default:
			var spliced []byte
			prev := 0
			for k := range it.results {
				r := &it.results[k]
				repl := r.lastRepl
				if r.path == "" || repl == "" {
					continue
				}
				if it.splice {
					// The same bytes sjson.SetBytes(raw, r.path, repl)
					// makes, without reading the item again.
					if spliced == nil {
						spliced = make([]byte, 0, len(it.raw))
					}
					spliced = append(spliced, it.raw[prev:r.vs-it.at]...)
					spliced = appendStringify(spliced, repl)
					prev = r.ve - it.at
					continue
				}
				nr, err := sjson.SetBytes(raw, r.path, repl)
				if err != nil {
					return nil, 0, err
				}
				raw = nr
			}
			if spliced != nil {
				raw = append(spliced, it.raw[prev:]...)
			}
			it.built = raw
			it.builtW, _ = scan(raw, c.api != wire.APIMessages)
		}
		if len(raw) == len(it.raw) && &raw[0] == &it.raw[0] {
			partsW += p.rawWeight(i)
		} else {
			partsW += it.builtW
		}
		parts = append(parts, raw)
	}

	seg := segment(st)
	var bodyEdit func([]byte) ([]byte, error)
	if seg != "" {
		var err error
		var first []byte
		if len(parts) > 0 {
			first = parts[0]
		}
		parts, bodyEdit, err = placeSegment(c.api, p.body, parts, c.items, seg)
		if err != nil {
			return nil, 0, err
		}
		if len(parts) > 0 && (len(first) == 0 || &parts[0][0] != &first[0] || len(parts[0]) != len(first)) {
			// The first part changed or was added: weigh it afresh.
			w, _ := scan(parts[0], c.api != wire.APIMessages)
			partsW += w
			if first != nil && len(parts) > 0 && parts[0] != nil && !isPrepended(parts, first) {
				w0, _ := scan(first, c.api != wire.APIMessages)
				partsW -= w0
			}
		}
	}
	listLen := 1
	for _, raw := range parts {
		listLen += len(raw) + 1
	}
	if c.listEnd == 0 {
		list := make([]byte, 0, listLen)
		list = appendList(list, parts)
		out, err := sjson.SetRawBytes(p.body, c.listPath, list)
		if err == nil && bodyEdit != nil {
			out, err = bodyEdit(out)
		}
		if err != nil {
			return nil, 0, err
		}
		return out, Estimate(c.api, out), nil
	}
	// Splice the list in place of the old one: the bytes around it stay
	// the agent's, and the list's position in the output is known.
	out := make([]byte, 0, c.listStart+listLen+len(p.body)-c.listEnd)
	out = append(out, p.body[:c.listStart]...)
	out = appendList(out, parts)
	listEnd := len(out)
	out = append(out, p.body[c.listEnd:]...)
	ls, le := c.listStart, listEnd
	if bodyEdit != nil {
		n := len(out)
		edited, err := bodyEdit(out)
		if err != nil {
			return nil, 0, err
		}
		// The edited member (system, instructions) sits either before the
		// list, shifting it, or after it.
		if d := len(edited) - n; d != 0 && !bytes.Equal(edited[len(edited)-(n-ls):], out[ls:]) {
			// after the list: nothing shifts
		} else {
			ls, le = ls+d, le+d
		}
		out = edited
	}
	baseW, tools := p.envelope(out, ls, le)
	return out, finish(c.api, baseW+partsW, tools), nil
}

// appendList appends the JSON array of parts.
func appendList(b []byte, parts [][]byte) []byte {
	b = append(b, '[')
	for i, raw := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, raw...)
	}
	return append(b, ']')
}

func isPrepended(parts [][]byte, first []byte) bool {
	return len(parts) > 1 && len(parts[1]) == len(first) && &parts[1][0] == &first[0]
}

// placeSegment puts the segment in the request's system part: appended to
// the system text the agent sent (so that the agent's own system prompt
// stays the cached prefix), or as a system message of its own at the front.
func placeSegment(api wire.API, body []byte, parts [][]byte, items []item, seg string) ([][]byte, func([]byte) ([]byte, error), error) {
	switch api {
	case wire.APIMessages:
		sys := gjson.GetBytes(body, "system")
		switch {
		case sys.Type == gjson.String && sys.String() != "":
			text := sys.String() + "\n\n" + seg
			return parts, func(b []byte) ([]byte, error) { return sjson.SetBytes(b, "system", text) }, nil
		case sys.IsArray() && len(sys.Array()) > 0:
			block := map[string]string{"type": "text", "text": seg}
			return parts, func(b []byte) ([]byte, error) { return sjson.SetBytes(b, "system.-1", block) }, nil
		default:
			return parts, func(b []byte) ([]byte, error) { return sjson.SetBytes(b, "system", seg) }, nil
		}
	case wire.APIResponses:
		if in := gjson.GetBytes(body, "instructions"); in.Type == gjson.String && in.String() != "" {
			text := in.String() + "\n\n" + seg
			return parts, func(b []byte) ([]byte, error) { return sjson.SetBytes(b, "instructions", text) }, nil
		}
	}
	partType := "text"
	if api == wire.APIResponses {
		partType = "input_text"
	}
	if len(items) > 0 && items[0].kind == kindSystem && (items[0].role == "system" || items[0].role == "developer") {
		first := parts[0]
		content := gjson.GetBytes(first, "content")
		var nr []byte
		var err error
		switch {
		case content.Type == gjson.String:
			nr, err = sjson.SetBytes(first, "content", content.String()+"\n\n"+seg)
		case content.IsArray():
			nr, err = sjson.SetBytes(first, "content.-1", map[string]string{"type": partType, "text": seg})
		}
		if err != nil {
			return nil, nil, err
		}
		if nr != nil {
			parts[0] = nr
			return parts, nil, nil
		}
	}
	msg, err := json.Marshal(map[string]string{"role": "system", "content": seg})
	if err != nil {
		return nil, nil, err
	}
	return append([][]byte{msg}, parts...), nil, nil
}

// appendStringify appends s as a JSON string, as sjson does (through
// json.Marshal when it must escape).
func appendStringify(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > 0x7f || s[i] == '"' || s[i] == '\\' {
			return appendMarshalString(buf, s)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// appendMarshalString appends the bytes json.Marshal(s) returns.
func appendMarshalString(dst []byte, src string) []byte {
	const hex = "0123456789abcdef"
	dst = slices.Grow(dst, len(src)+len(src)/8+2)
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(src); {
		if b := src[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, src[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(src[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, src[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, src[start:]...)
	return append(dst, '"')
}
