package contextmgr

import (
	"bytes"
	"encoding/json"
	"strconv"
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
	cheap := p.c.api != wire.APIMessages
	p.w = make([]int64, len(items))
	p.rawW = make([]int64, len(items))
	p.dropW = make([]int64, len(items)+1)
	p.callAt = map[string]int{}
	p.resultAt = map[string]int{}
	var itemsW int64
	limit := p.rw.inlineLimit()
	for i := range items {
		it := &items[i]
		w, _ := scan(it.raw, cheap)
		p.rawW[i] = w
		itemsW += w
		for _, r := range it.results {
			p.resultAt[r.id] = i
			if r.path == "" || len(r.text) <= limit {
				continue
			}
			// Planning only: bytes stand in for characters here, the build
			// cuts on characters.
			h, t := min(p.rw.head(), len(r.text)), max(len(r.text)-p.rw.tail(), 0)
			if h < t {
				w += noteWeight - weigh([]byte(r.text[h:t]))
			}
		}
		for _, c := range it.calls {
			p.callAt[c.id] = i
		}
		p.w[i] = w
	}
	for i := range items {
		p.dropW[i+1] = p.dropW[i]
		if i >= p.c.head && items[i].kind != kindSystem {
			p.dropW[i+1] += p.w[i]
		}
	}
	// The envelope is weighed apart from the items rather than the whole
	// body again: one pass over the bytes instead of two.
	var baseW int64
	if p.c.listEnd > 0 {
		baseW, p.tools = p.envelope(p.body, p.c.listStart, p.c.listEnd)
	} else {
		bodyW, tools := scan(p.body, cheap)
		baseW, p.tools = bodyW-itemsW, tools
	}
	p.total = baseW
	for _, w := range p.w {
		p.total += w
	}
	p.turns = turnsOf(items, p.c.head)
	p.starts = map[int]bool{}
	for _, t := range p.turns {
		if !t.sticky {
			p.starts[t.start] = true
		}
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
	seg := weigh([]byte(segment(p.st))) + summaryReserve
	return finish(p.c.api, p.total-p.dropW[cut]+seg, p.tools)
}

// cutBounds returns the byte offsets of the kept head's end and the kept
// tail's start of a text to cut.
func (p *plan) cutBounds(text string) (headEnd, tailStart int) {
	n := utf8.RuneCountInString(text)
	head, tail := p.rw.head(), p.rw.tail()
	if head+tail > n {
		head, tail = n/2, 0
	}
	headEnd = runeOffset(text, 0, head)
	tailStart = runeOffset(text, headEnd, n-head-tail)
	return headEnd, tailStart
}

// runeOffset returns the byte offset reached after skipping k runes of s
// from byte offset from.
func runeOffset(s string, from, k int) int {
	i := from
	for ; k > 0 && i < len(s); k-- {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// cutText returns the head and tail of a long tool output with a line
// naming the handle of the full text.
func (p *plan) cutText(text string) string {
	h, t := p.cutBounds(text)
	key := textKey(text)
	handle := p.st.Blobs[key]
	if handle == "" && p.rw.Blob != nil {
		handle = p.rw.Blob(text)
		if handle != "" {
			if p.st.Blobs == nil {
				p.st.Blobs = map[string]string{}
			}
			p.st.Blobs[key] = handle
			p.rep.Blobs = append(p.rep.Blobs, handle)
		}
	}
	total := utf8.RuneCountInString(text)
	cut := total - utf8.RuneCountInString(text[:h]) - utf8.RuneCountInString(text[t:])
	p.rep.Cut++
	p.rep.CutChars += int64(cut)
	note := "\n\n[haltline: " + strconv.Itoa(cut) + " of " + strconv.Itoa(total) + " characters of this tool output were cut here; "
	if handle != "" {
		note += "the full text is kept as handle " + handle + "]\n\n"
	} else {
		note += "the full text was not kept]\n\n"
	}
	return text[:h] + note + text[t:]
}

// build renders the request with the droppable items [head, cut) removed,
// tool outputs cut and deduplicated, and the state's segment in the system
// part. It returns the body and its estimate.
func (p *plan) build(cut int) ([]byte, int64, error) {
	c, st := p.c, p.st
	p.rep.Cut, p.rep.CutChars, p.rep.Deduped = 0, 0, 0
	limit, dmin := p.rw.inlineLimit(), p.rw.dedupeMin()
	seen := map[string]string{}
	parts := make([][]byte, 0, len(c.items)+1)
	var partsW int64
	for i := range c.items {
		it := &c.items[i]
		if i >= c.head && i < cut && it.kind != kindSystem {
			continue
		}
		raw := it.raw
		for _, r := range it.results {
			if r.path == "" {
				continue
			}
			repl := ""
			if len(r.text) >= dmin {
				k := textKey(r.text)
				if first, ok := seen[k]; ok {
					repl = "[same result as call " + first + "]"
					p.rep.Deduped++
				} else {
					seen[k] = r.id
				}
			}
			if repl == "" && len(r.text) > limit && utf8.RuneCountInString(r.text) > limit {
				repl = p.cutText(r.text)
			}
			if repl == "" {
				continue
			}
			nr, err := sjson.SetBytes(raw, r.path, repl)
			if err != nil {
				return nil, 0, err
			}
			raw = nr
		}
		if len(raw) == len(it.raw) && &raw[0] == &it.raw[0] {
			partsW += p.rawW[i]
		} else {
			w, _ := scan(raw, c.api != wire.APIMessages)
			partsW += w
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
	var list bytes.Buffer
	list.Grow(len(p.body))
	list.WriteByte('[')
	for i, raw := range parts {
		if i > 0 {
			list.WriteByte(',')
		}
		list.Write(raw)
	}
	list.WriteByte(']')
	if c.listEnd == 0 {
		out, err := sjson.SetRawBytes(p.body, c.listPath, list.Bytes())
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
	out := make([]byte, 0, c.listStart+list.Len()+len(p.body)-c.listEnd)
	out = append(out, p.body[:c.listStart]...)
	out = append(out, list.Bytes()...)
	out = append(out, p.body[c.listEnd:]...)
	ls, le := c.listStart, c.listStart+list.Len()
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
