package contextmgr

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// Defaults of a zero Rewriter (docs/design.md §8 for the tool output sizes).
const (
	DefaultKeepTurns   = 4
	DefaultInlineLimit = 4096
	DefaultHead        = 1500
	DefaultTail        = 500
	DefaultCompressTo  = 0.5
	DefaultDedupeMin   = 256
)

// ErrInvalidBody is returned for a body that is not JSON; the body is then
// returned unchanged.
var ErrInvalidBody = errors.New("contextmgr: request body is not valid JSON")

// Rewriter rewrites a request so that it fits under a watermark. A
// Rewriter is configuration only: it is safe for concurrent use by many
// runs, each with its own State.
type Rewriter struct {
	// Blob stores the full text of a cut tool output and returns the handle
	// the cut text names (docs/design.md §7 serves it at
	// /api/v1/runs/{id}/blobs/{handle}). It is called for the outputs a
	// rewrite forwards cut (not for those a compression drops), once per
	// distinct output per run: the handle is remembered in State.Blobs.
	// Nil means the full text is not kept, and the cut text says so.
	Blob func(text string) (handle string)
	// Summarise, when set, writes the summary of dropped turns (the lead
	// wires a model call here). prev is the run's summary so far; the
	// returned summary replaces it, so the callback merges. Facts are
	// pinned (never overwriting a pinned key). On error the extractive
	// summary is used and the error reported.
	Summarise func(ctx context.Context, prev string, dropped []Turn) (summary string, facts map[string]string, err error)

	// Keep, when set, names the tools whose output is forwarded whole,
	// never cut (an agent that reads source files may need them whole);
	// tool is "" when the call a result answers is not in the request.
	Keep func(tool string) bool

	KeepTurns   int     // last turns never dropped; 0 means DefaultKeepTurns
	InlineLimit int     // tool output longer than this (in characters) is cut; 0 means DefaultInlineLimit
	Head, Tail  int     // characters kept of a cut output; 0 means DefaultHead / DefaultTail
	CompressTo  float64 // a compression drops down to this fraction of the watermark; 0 means DefaultCompressTo
	DedupeMin   int     // shorter identical results are left alone; 0 means DefaultDedupeMin
}

// Report says what a Rewrite did, for events and metrics. The counts are
// about the forwarded request of this call.
type Report struct {
	Rewritten    bool  `json:"rewritten"`
	TokensBefore int64 `json:"tokens_before"` // estimate of the agent's request
	TokensAfter  int64 `json:"tokens_after"`  // estimate of the forwarded request
	Watermark    int64 `json:"watermark"`

	Cut      int   `json:"cut"`       // tool results cut to head + tail
	CutChars int64 `json:"cut_chars"` // characters cut from them
	Deduped  int   `json:"deduped"`   // tool results replaced by a reference to an identical earlier one
	Dropped  int   `json:"dropped"`   // history items not forwarded (the summary stands in)

	// Compressed is set when this call dropped more turns and wrote a new
	// summary: the cached prefix changes here. Reused is set when the
	// run's compressed prefix was reused byte for byte.
	Compressed   bool   `json:"compressed"`
	Reused       bool   `json:"reused"`
	NewlyDropped int    `json:"newly_dropped"`
	SummaryBy    string `json:"summary_by,omitempty"` // "extractive" or "summariser", when Compressed
	SummaryError string `json:"summary_error,omitempty"`
	FactsAdded   int    `json:"facts_added"`
	// Blobs are the handles Blob returned on this call, and NewCuts the
	// outputs they keep: each cut the first time, the same way later.
	Blobs   []string    `json:"blobs,omitempty"`
	NewCuts []CutOutput `json:"new_cuts,omitempty"`
	// Over is set when the forwarded request is still over the watermark:
	// the system prompt, the task and the last turn alone do not fit.
	Over bool `json:"over"`
}

// CutOutput is a tool output cut for the first time in a run.
type CutOutput struct {
	Tool     string `json:"tool,omitempty"`
	Handle   string `json:"handle"`
	Chars    int    `json:"chars"`     // the output's length, in characters
	CutChars int    `json:"cut_chars"` // characters left out of the forwarded text
}

func (rw *Rewriter) keepTurns() int   { return orDefault(rw.KeepTurns, DefaultKeepTurns) }
func (rw *Rewriter) inlineLimit() int { return orDefault(rw.InlineLimit, DefaultInlineLimit) }
func (rw *Rewriter) head() int        { return orDefault(rw.Head, DefaultHead) }
func (rw *Rewriter) tail() int        { return orDefault(rw.Tail, DefaultTail) }
func (rw *Rewriter) dedupeMin() int   { return orDefault(rw.DedupeMin, DefaultDedupeMin) }
func (rw *Rewriter) compressTo() float64 {
	if rw.CompressTo <= 0 || rw.CompressTo > 1 {
		return DefaultCompressTo
	}
	return rw.CompressTo
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// Rewrite returns the body to forward for a request of the given API. A
// body under the watermark comes back as the same slice, untouched. Over
// it, tool outputs are cut and deduplicated, then, only if that is not
// enough, the oldest turns are dropped and summarised into the system
// segment, down to CompressTo × watermark so that the following calls fit
// without a new compression. body is never modified; st (per run, may be
// nil for a one-off) is updated.
func (rw *Rewriter) Rewrite(ctx context.Context, api wire.API, body []byte, watermark int64, st *State) (out []byte, rep Report, err error) {
	if bound := upperBound(api, len(body)); watermark <= 0 || bound <= watermark {
		return body, Report{TokensBefore: bound, TokensAfter: bound, Watermark: watermark}, nil
	}
	// One pass validates, weighs and reads the body: the estimate is the
	// one NeedsRewrite gives, without reading the body a second time.
	c := getConv()
	defer putConv(c)
	before, valid, ok := c.read(api, body)
	if !valid {
		before = Estimate(api, body)
	}
	rep = Report{TokensBefore: before, TokensAfter: before, Watermark: watermark}
	if before <= watermark {
		return body, rep, nil
	}
	if !valid {
		return body, rep, ErrInvalidBody
	}
	if !ok {
		rep.Over = true
		return body, rep, nil
	}
	if st == nil {
		st = &State{}
	}
	p := &plan{rw: rw, c: c, st: st, body: body, rep: &rep}
	p.index()

	// Reuse the run's compressed prefix when the history still starts with
	// what was dropped: that is what keeps the prefix byte-stable.
	c0 := c.head
	if st.CutEnd > 0 {
		if st.CutEnd <= len(c.items) && st.CutEnd >= c.head && c.prefixIs(st, body, st.CutEnd, st.CutHash) && p.valid(st.CutEnd) {
			c0 = st.CutEnd
			rep.Reused = true
		} else {
			// The agent's history changed under us (its own compaction, an
			// edited history): start over, keeping the pinned facts and
			// the stored blobs.
			st.CutEnd, st.CutHash, st.LastDropped, st.Summary, st.SummaryBy, st.Dropped = 0, "", "", "", "", 0
			p.stateChanged()
		}
	}

	// Whether the kept history fits is first asked of a lower bound that
	// calls no Blob: when it does not fit, most of the outputs it would
	// have stored are about to be dropped.
	p.bounding = true
	est, err := p.estimate(c0)
	p.bounding = false
	if err == nil && est <= watermark && p.provisional {
		est, err = p.estimate(c0)
	}
	if err != nil {
		return body, rep, err
	}
	if est > watermark {
		out, est, err = p.compress(ctx, c0, watermark)
	} else {
		out, err = p.assemble(c0)
	}
	if err != nil {
		return body, rep, err
	}
	rep.Rewritten = true
	rep.TokensAfter = est
	rep.Dropped = st.Dropped
	rep.Over = est > watermark
	return out, rep, nil
}

// Cut returns the body with every tool output longer than the inline
// limit cut to its head and tail around a note naming its handle, and
// nothing else changed: no deduplication, no dropped turn, whatever the
// size of the request. The cut is stable: an output is cut into the same
// text on every call of the run (its handle is remembered in st.Blobs), so
// a forwarded prefix stays byte-identical from call to call and prompt
// caches keep hitting. A body with no output to cut comes back as the
// same slice; one holding no string longer than the limit is not read.
func (rw *Rewriter) Cut(api wire.API, body []byte, st *State) (out []byte, rep Report, err error) {
	if !MayCut(body, rw.InlineLimit) {
		return body, rep, nil
	}
	c := getConv()
	defer putConv(c)
	est, valid, ok := c.read(api, body)
	rep = Report{TokensBefore: est, TokensAfter: est}
	if !valid {
		return body, rep, ErrInvalidBody
	}
	if !ok {
		return body, rep, nil
	}
	if st == nil {
		st = &State{}
	}
	cutOnly := *rw
	cutOnly.DedupeMin = math.MaxInt
	// The run's compression (summary, facts, dropped turns) belongs to
	// Rewrite: Cut shares only the handles of the outputs it cut.
	cst := &State{Blobs: st.Blobs}
	p := &plan{rw: &cutOnly, c: c, st: cst, body: body, rep: &rep}
	p.index()
	if est, err = p.estimate(c.head); err != nil {
		return body, rep, err
	}
	st.Blobs = cst.Blobs
	if rep.Cut == 0 {
		return body, rep, nil
	}
	if out, err = p.assemble(c.head); err != nil {
		return body, rep, err
	}
	rep.Rewritten, rep.TokensAfter = true, est
	return out, rep, nil
}

// MayCut reports whether Cut with this inline limit (0: the default) may
// have anything to cut in body: whether it holds a JSON string whose raw
// bytes outnumber limit characters. Most requests hold none, and this one
// pass of the string scanner (none below the limit's size) is all they
// pay.
func MayCut(body []byte, limit int) bool {
	limit = orDefault(limit, DefaultInlineLimit)
	if len(body) <= limit || !mayHoldToolOutput(body) {
		return false
	}
	s := unsafe.String(unsafe.SliceData(body), len(body))
	for i := 0; i < len(s); {
		q := strings.IndexByte(s[i:], '"')
		if q < 0 {
			return false
		}
		start := i + q
		end := jsonscan.SkipString(s, start)
		if end < 0 {
			return true // not JSON: let the reader say so
		}
		if end-start-2 > limit {
			return true
		}
		i = end
	}
	return false
}

// mayHoldToolOutput reports whether body may hold a tool output at all: a
// chat message of role "tool" (or the older "function"), a Responses item
// whose type ends in "_output", an Anthropic "tool_result" block. A request
// without one (a long prompt, a pasted document) is then not read for
// outputs to cut. Unless the body escapes a lowercase letter or '_' as
// \u00XX, those values can only be written one way, so a literal search
// decides; when it does, the body is read.
func mayHoldToolOutput(body []byte) bool {
	if escapesMarkerByte(body) || bytes.Contains(body, []byte(`"tool"`)) ||
		bytes.Contains(body, []byte(`"tool_result"`)) || bytes.Contains(body, []byte(`_output"`)) {
		return true
	}
	// "function" is also every tool definition's type: only a role counts.
	for rest := body; ; {
		i := bytes.Index(rest, []byte(`"function"`))
		if i < 0 {
			return false
		}
		before := bytes.TrimRight(rest[:i], " \t\r\n")
		if bytes.HasSuffix(before, []byte(":")) && bytes.HasSuffix(bytes.TrimRight(before[:len(before)-1], " \t\r\n"), []byte(`"role"`)) {
			return true
		}
		rest = rest[i+len(`"function"`):]
	}
}

// escapesMarkerByte reports whether body holds a \u escape of a byte the
// tool-output markers are written with (a lowercase letter or '_'). The
// escapes clients do write (non-ASCII text, <, > and &) are not.
func escapesMarkerByte(body []byte) bool {
	for rest := body; ; {
		i := bytes.Index(rest, []byte(`\u00`))
		if i < 0 {
			return false
		}
		if i+6 > len(rest) {
			return true
		}
		c, err := strconv.ParseUint(string(rest[i+4:i+6]), 16, 8)
		if err != nil || c == '_' || (c >= 'a' && c <= 'z') {
			return true
		}
		rest = rest[i+6:]
	}
}

// convPool keeps the readings of past requests: their item lists, decoded
// texts and backing stores are reused rather than allocated per request.
var convPool = sync.Pool{New: func() any { return new(conv) }}

// poolMax bounds the buffers a pooled reading keeps, so that one huge
// request does not pin its memory for good.
const poolMax = 4 << 20

func getConv() *conv { return convPool.Get().(*conv) }

func putConv(c *conv) {
	// Drop every reference into the request (raw items, texts) before the
	// reading is reused.
	clear(c.items)
	clear(c.callBuf)
	clear(c.resBuf)
	if len(c.callAt) > 4096 {
		c.callAt, c.resultAt = nil, nil
	}
	clear(c.callAt)
	clear(c.resultAt)
	*c = conv{
		items:    c.items[:0],
		arena:    c.arena[:0],
		callBuf:  c.callBuf[:0],
		resBuf:   c.resBuf[:0],
		textBuf:  c.textBuf[:0],
		callAt:   c.callAt,
		resultAt: c.resultAt,
	}
	if cap(c.arena) > poolMax {
		c.arena = nil
	}
	if cap(c.textBuf) > poolMax {
		c.textBuf = nil
	}
	if cap(c.items) > poolMax/int(unsafe.Sizeof(item{})) {
		c.items = nil
	}
	if cap(c.resBuf) > poolMax/int(unsafe.Sizeof(result{})) {
		c.resBuf = nil
	}
	convPool.Put(c)
}

// compress drops turns after c0 until the request fits CompressTo ×
// watermark (the target), relaxing KeepTurns only when the last K turns
// alone do not fit the watermark itself.
func (p *plan) compress(ctx context.Context, c0 int, watermark int64) ([]byte, int64, error) {
	target := int64(float64(watermark) * p.rw.compressTo())
	cands := p.candidates(c0)
	if len(cands) == 0 {
		est, err := p.estimate(c0)
		if err != nil {
			return nil, 0, err
		}
		out, err := p.assemble(c0)
		return out, est, err
	}
	kLimit := p.keepLimit()
	choice := -1
	for i, c := range cands {
		if c > kLimit {
			break
		}
		choice = i
		if p.planned(c) <= target {
			break
		}
	}
	if choice < 0 || p.planned(cands[choice]) > watermark {
		// The last K turns do not fit: give up turns one at a time, never
		// the last one.
		for i := max(choice, 0); i < len(cands); i++ {
			choice = i
			if p.planned(cands[i]) <= watermark {
				break
			}
		}
	}
	p.summarise(ctx, c0, cands[choice])
	for {
		est, err := p.estimate(cands[choice])
		if err != nil {
			return nil, 0, err
		}
		if est <= watermark || choice == len(cands)-1 {
			out, err := p.assemble(cands[choice])
			return out, est, err
		}
		// The plan under-estimated (the summary came out longer than its
		// reserve): drop one more turn, summarised extractively.
		prev := cands[choice]
		choice++
		p.summariseExtractive(prev, cands[choice])
	}
}

// summarise records the compression of turns [from, to) in the state.
func (p *plan) summarise(ctx context.Context, from, to int) {
	st, rep := p.st, p.rep
	// The callback may keep what it is given; the extractive summary only
	// reads the texts, so it gets views of them rather than copies.
	dropped := neutralTurns(p.c, turnsOf(p.c.items[:to], from), p.rw.Summarise == nil)
	var facts []Fact
	rep.SummaryBy = "extractive"
	if p.rw.Summarise != nil {
		s, f, err := p.rw.Summarise(ctx, st.Summary, dropped)
		if err == nil {
			st.Summary = clip(s, summaryMax)
			facts = summariserFacts(f)
			rep.SummaryBy = "summariser"
		} else {
			rep.SummaryError = err.Error()
		}
	}
	if rep.SummaryBy == "extractive" {
		st.Summary = mergeSummary(st.Summary, extractiveSummary(dropped))
	}
	st.SummaryBy = rep.SummaryBy
	rep.FactsAdded += st.pin(extractFacts(dropped))
	rep.FactsAdded += st.pin(facts)
	p.recordCut(to)
	st.Compressions++
	rep.Compressed = true
}

func (p *plan) summariseExtractive(from, to int) {
	dropped := neutralTurns(p.c, turnsOf(p.c.items[:to], from), true)
	p.st.Summary = mergeSummary(p.st.Summary, extractiveSummary(dropped))
	p.rep.FactsAdded += p.st.pin(extractFacts(dropped))
	p.recordCut(to)
}

func (p *plan) recordCut(to int) {
	st, items := p.st, p.c.items
	p.stateChanged()
	prevDropped := st.Dropped
	st.CutEnd = to
	st.CutHash = p.c.prefixHash(to)
	p.c.remember(st, p.body, to, st.CutHash)
	st.Dropped = 0
	for i := p.c.head; i < to; i++ {
		if items[i].kind != kindSystem {
			st.Dropped++
		}
	}
	p.rep.NewlyDropped += st.Dropped - prevDropped
	for i := to - 1; i >= p.c.head; i-- {
		it := items[i]
		if it.kind == kindSystem {
			continue
		}
		switch {
		case len(it.results) > 0:
			st.LastDropped = "result:" + it.results[len(it.results)-1].id
		case len(it.calls) > 0:
			st.LastDropped = "call:" + it.calls[len(it.calls)-1].id
		default:
			st.LastDropped = it.role + "#" + strconv.Itoa(i)
		}
		break
	}
}
