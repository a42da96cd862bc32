package contextmgr

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/sjson"
)

// Building the forwarded body. A cut is first decided (which results are
// cut or deduplicated) and estimated from the weights of its parts: the
// reader weighed every item and the envelope, and a replaced result
// changes its item's weight by the weight of the new string minus that of
// the old. Only the cut that is forwarded is assembled, into one buffer of
// the exact size. Bodies read by the slow reader are assembled and
// scanned instead.

// assembly is a body assembled to be estimated (bodies the slow reader
// read), kept for forwarding it; a new decision drops it.
type assembly struct {
	cut int
	seg string
	out []byte
}

// decide sets the replacement of every kept result of the request cut at
// cut: a reference to an identical earlier result, or the cut text. The
// report's Cut, CutChars and Deduped count them.
func (p *plan) decide(cut int) {
	c := p.c
	p.rep.Cut, p.rep.CutChars, p.rep.Deduped = 0, 0, 0
	p.last = assembly{}
	limit, dmin := p.rw.inlineLimit(), p.rw.dedupeMin()
	if p.seen == nil {
		p.seen = make(map[uint64]string, len(c.items))
	} else {
		clear(p.seen)
	}
	for i := range c.items {
		it := &c.items[i]
		if p.dropped(i, cut) {
			continue
		}
		replaced := false
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" {
				continue
			}
			repl := ""
			if r.rawLen() >= dmin {
				c.measure(r)
				if r.n >= dmin {
					if first, ok := p.seen[r.sum]; ok {
						repl = "[same result as call " + first + "]"
						p.rep.Deduped++
					} else {
						p.seen[r.sum] = r.id
					}
				}
			}
			if repl == "" && r.rawLen() > limit && !p.keeps(r) {
				c.measure(r)
				if r.n > limit && r.runes > limit {
					repl = p.cutText(r)
				}
			}
			if repl != r.lastRepl {
				it.stale = true
			}
			replaced = replaced || repl != ""
			r.lastRepl = repl
		}
		it.replaced = replaced
	}
	p.decided = cut
}

// keeps reports whether r's tool is one whose output goes whole (Keep).
func (p *plan) keeps(r *result) bool {
	return p.rw.Keep != nil && p.rw.Keep(p.toolOf(r))
}

// toolOf names the tool whose call r answers, "" when the call is not in
// the request.
func (p *plan) toolOf(r *result) string {
	i, ok := p.c.callAt[r.id]
	if !ok {
		return ""
	}
	for _, cl := range p.c.items[i].calls {
		if cl.id == r.id {
			return cl.name
		}
	}
	return ""
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

// cutText decides the cut of a long tool output: its head and tail around
// a line naming the handle of the full text. It returns the replacement's
// key (see result.lastRepl); the text itself is only ever encoded, from
// the decoded output, when the result is forwarded (conv.encode).
func (p *plan) cutText(r *result) string {
	if r.cutOK {
		p.rep.Cut++
		p.rep.CutChars += int64(r.cutChars)
		return r.cutKey
	}
	c := p.c
	c.measure(r)
	key := hexKey(r.sum)
	handle := p.st.Blobs[key]
	provisional := false
	if handle == "" && p.rw.Blob != nil && p.bounding {
		// Priced as not kept, the lightest note: the estimate is then a
		// lower bound, and Blob is left for outputs that are forwarded.
		provisional, p.provisional = true, true
	} else if handle == "" && p.rw.Blob != nil {
		handle = p.rw.Blob(c.textOf(r))
		if handle != "" {
			if p.st.Blobs == nil {
				p.st.Blobs = map[string]string{}
			}
			p.st.Blobs[key] = handle
			p.rep.Blobs = append(p.rep.Blobs, handle)
			defer func() {
				p.rep.NewCuts = append(p.rep.NewCuts, CutOutput{Tool: p.toolOf(r), Handle: handle,
					Chars: r.runes, CutChars: r.cutChars})
			}()
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
	r.cutH, r.cutT, r.cutChars, r.cutNote = h, t, cut, b.String()
	r.cutKey = cutMark + r.cutNote
	// Later plans of this Rewrite cut it into the same text, unless its
	// handle is still to come.
	r.cutOK = !provisional && (handle != "" || p.rw.Blob == nil)
	return r.cutKey
}

// cutMark starts the key of a cut (result.lastRepl); no reference to an
// identical result starts with it.
const cutMark = "\x00cut"

func (r *result) isCut() bool { return strings.HasPrefix(r.lastRepl, cutMark) }

// encode returns the JSON string that replaces r's text (r.lastRepl),
// encoded once per replacement: what sjson.SetBytes writes for it.
func (c *conv) encode(r *result) []byte {
	if r.enc != nil && r.encFor == r.lastRepl {
		return r.enc
	}
	if r.isCut() {
		// The cut note holds line breaks, so sjson marshals the whole
		// text: head, note and tail are marshalled in turn, which is the
		// same as the joined text split between runes.
		text := c.decoded(r)
		r.enc = append(r.enc[:0], '"')
		r.enc = appendMarshal(r.enc, text[:r.cutH])
		r.enc = appendMarshal(r.enc, strBytes(r.cutNote))
		r.enc = appendMarshal(r.enc, text[r.cutT:])
		r.enc = append(r.enc, '"')
	} else {
		r.enc = appendStringify(r.enc[:0], r.lastRepl)
	}
	r.encFor = r.lastRepl
	return r.enc
}

// replWeight returns the weight scan gives the replacement of r's text as
// a value, without encoding it. The member is "content" or "output":
// neither an id nor a blob, so the string weighs its bytes and the value's
// fixed cost.
func (c *conv) replWeight(r *result) int64 {
	if r.wFor == r.lastRepl {
		return r.encW
	}
	var w int64
	switch {
	case r.enc != nil && r.encFor == r.lastRepl:
		w = weigh(r.enc[1 : len(r.enc)-1])
	case r.isCut():
		text := c.decoded(r)
		w = marshalWeight(text[:r.cutH]) + marshalWeight(strBytes(r.cutNote)) + marshalWeight(text[r.cutT:])
	case mustMarshal(r.lastRepl):
		w = marshalWeight(strBytes(r.lastRepl))
	default:
		w = weigh(strBytes(r.lastRepl))
	}
	r.encW, r.wFor = w+valueWeight, r.lastRepl
	return r.encW
}

// replString returns the replacement of r's text as a string, for sjson.
func (c *conv) replString(r *result) string {
	if !r.isCut() {
		return r.lastRepl
	}
	text := c.decoded(r)
	return string(text[:r.cutH]) + r.cutNote + string(text[r.cutT:])
}

// estimate decides the request cut at cut and returns its estimate.
func (p *plan) estimate(cut int) (int64, error) {
	p.decide(cut)
	c := p.c
	pl, err := p.placement()
	if err != nil {
		return 0, err
	}
	if !c.exact {
		out, err := p.assemble(cut)
		if err != nil {
			return 0, err
		}
		return Estimate(c.api, out), nil
	}
	w, tools := pl.envW, pl.envTools
	if pl.kind == placePrepend {
		w += pl.firstW
	}
	for i := range c.items {
		if p.dropped(i, cut) {
			continue
		}
		if i == 0 && pl.firstReplaced {
			w += pl.firstW
			tools = tools || pl.firstTools
			continue
		}
		iw, it, err := p.itemWeight(i)
		if err != nil {
			return 0, err
		}
		w += iw
		tools = tools || it
	}
	return finish(c.api, w, tools), nil
}

// itemWeight returns what scan says of item i as forwarded.
func (p *plan) itemWeight(i int) (int64, bool, error) {
	it := &p.c.items[i]
	switch {
	case !it.replaced:
		return it.w, it.tools, nil
	case it.splice:
		w := it.w
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" || r.lastRepl == "" {
				continue
			}
			w += p.c.replWeight(r) - r.valW
		}
		return w, it.tools, nil
	}
	if err := p.rebuild(it); err != nil {
		return 0, false, err
	}
	return it.builtW, it.builtTools, nil
}

// rebuild replaces an item's results through sjson, for items whose texts
// cannot be spliced in place.
func (p *plan) rebuild(it *item) error {
	if it.built != nil && !it.stale {
		return nil
	}
	raw := it.raw
	for k := range it.results {
		r := &it.results[k]
		if r.path == "" || r.lastRepl == "" {
			continue
		}
		nr, err := sjson.SetBytes(raw, r.path, p.c.replString(r))
		if err != nil {
			return err
		}
		raw = nr
	}
	it.built, it.stale = raw, false
	it.builtW, it.builtTools = scan(raw, p.c.api != wire.APIMessages)
	return nil
}

// appendItem appends item it as forwarded.
func (p *plan) appendItem(out []byte, it *item) ([]byte, error) {
	switch {
	case !it.replaced:
		return append(out, it.raw...), nil
	case it.splice:
		// The same bytes sjson.SetBytes(raw, r.path, repl) makes, without
		// reading the item again.
		prev := 0
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" || r.lastRepl == "" {
				continue
			}
			enc := p.c.encode(r)
			out = append(out, it.raw[prev:r.vs-it.at]...)
			out = append(out, enc...)
			prev = r.ve - it.at
		}
		return append(out, it.raw[prev:]...), nil
	}
	if err := p.rebuild(it); err != nil {
		return nil, err
	}
	return append(out, it.built...), nil
}

// itemLen returns the length of item it as forwarded.
func (p *plan) itemLen(it *item) (int, error) {
	switch {
	case !it.replaced:
		return len(it.raw), nil
	case it.splice:
		n := len(it.raw)
		for k := range it.results {
			r := &it.results[k]
			if r.path == "" || r.lastRepl == "" {
				continue
			}
			n += len(p.c.encode(r)) - (r.ve - r.vs)
		}
		return n, nil
	}
	if err := p.rebuild(it); err != nil {
		return 0, err
	}
	return len(it.built), nil
}

// assemble renders the request with the droppable items [head, cut)
// removed, tool outputs cut and deduplicated as decided, and the state's
// segment in the system part.
func (p *plan) assemble(cut int) ([]byte, error) {
	c := p.c
	if p.decided != cut {
		p.decide(cut)
	}
	seg := p.segment()
	if a := &p.last; a.out != nil && a.cut == cut && a.seg == seg {
		return a.out, nil
	}
	pl, err := p.placement()
	if err != nil {
		return nil, err
	}
	// The list's bytes, then what surrounds it: the agent's envelope, or
	// the envelope with the segment placed.
	size, n := 2, 0
	if pl.kind == placePrepend {
		size += len(pl.first)
		n++
	}
	for i := range c.items {
		if p.dropped(i, cut) {
			continue
		}
		it := &c.items[i]
		var l int
		if i == 0 && pl.firstReplaced {
			l = len(pl.first)
		} else if l, err = p.itemLen(it); err != nil {
			return nil, err
		}
		size += l
		n++
	}
	size += max(n-1, 0)
	var before, after []byte
	switch {
	case pl.kind == placeBody && c.listEnd > 0:
		before, after = pl.env[:pl.envList], pl.env[pl.envList+2:]
	case c.listEnd > 0:
		before, after = p.body[:c.listStart], p.body[c.listEnd:]
	}
	out := make([]byte, 0, len(before)+size+len(after))
	out = append(out, before...)
	out = append(out, '[')
	n = 0
	if pl.kind == placePrepend {
		out = append(out, pl.first...)
		n++
	}
	for i := range c.items {
		if p.dropped(i, cut) {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if i == 0 && pl.firstReplaced {
			out = append(out, pl.first...)
			continue
		}
		if out, err = p.appendItem(out, &c.items[i]); err != nil {
			return nil, err
		}
	}
	out = append(out, ']')
	if c.listEnd == 0 {
		// The slow reader could not say where the list is: set it
		// by path.
		if out, err = sjson.SetRawBytes(p.body, c.listPath, out); err != nil {
			return nil, err
		}
		if pl.kind == placeBody {
			if out, err = sjson.SetBytes(out, pl.editPath, pl.editValue); err != nil {
				return nil, err
			}
		}
	} else {
		out = append(out, after...)
	}
	if !c.exact {
		p.last = assembly{cut: cut, seg: seg, out: out}
	}
	return out, nil
}
