package contextmgr

import (
	"bytes"
	"math"
	"unsafe"

	"github.com/zeebo/xxh3"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
)

// Token estimates.
//
// The estimator never tokenizes: it sums a per-byte weight over the request
// body in one pass, because the decision "does this request fit under the
// watermark" is taken on every call and must cost microseconds, while a
// tokenizer per model family would cost milliseconds and a dependency. The
// weights encode what BPE tokenizers do to agent traffic:
//
//   - letters cost about 1/3.7 token and a space costs nothing, because
//     " word" is one token: English prose lands near 4 chars per token;
//   - digits cost more (o200k and Claude split numbers into groups of 1–3);
//   - JSON punctuation costs a fraction of a token: outside strings it is the
//     request envelope, which the provider renders into a few template tokens
//     per message; inside tool output (escaped JSON, code) the same bytes are
//     real tokens, so JSON- and code-heavy content comes out near 2.5–3 chars
//     per token without having to know which is which;
//   - other punctuation costs about half a token;
//   - a backslash costs most of a token: in tool output an escaped quote is
//     JSON inside a string, and an escaped newline is followed by
//     indentation, which as spaces costs nothing but is a token of its own;
//   - a multi-byte UTF-8 character costs 0.8 token (o200k encodes common
//     CJK words in one token, so CJK is over-counted by 20–30% for OpenAI;
//     accented Latin is over-counted too, which errs on the safe side);
//   - white space outside strings (pretty-printed bodies) costs nothing.
//
// Opaque blobs (encrypted reasoning, thinking signatures, base64 images) are
// re-weighed at one token per blobRatio bytes, capped: the provider does not
// bill them as text.
//
// Measured against provider usage on the recorded fixtures (testdata/usage,
// TestEstimateAgainstRecordedUsage) and against o200k counts of a corpus per
// content class (testdata/tokref, TestEstimatorError); see doc.go for the
// tables.

// weightScale is the fixed-point unit of the byte weights: 1 token = 1000.
const weightScale = 1000

var byteWeight = func() (w [256]uint16) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			w[c] = 270
		case c >= '0' && c <= '9':
			w[c] = 400
		case c == ' ', c == '\n', c == '\r', c == '\t':
			w[c] = 0
		case c == '"', c == ':', c == ',':
			w[c] = 150
		case c == '\\':
			w[c] = backslashWeight
		case c == '{', c == '}', c == '[', c == ']':
			w[c] = 250
		case c < 0x20:
			w[c] = 0
		case c < 0x80:
			w[c] = 450
		case c < 0xC0:
			w[c] = 0 // UTF-8 continuation byte: counted with its lead byte
		default:
			w[c] = leadWeight
		}
	}
	return w
}()

// outerWeight weighs bytes outside strings: numbers and literals cost as
// text, JSON structure and white space cost nothing (see scan).
var outerWeight = func() (w [256]uint16) {
	w = byteWeight
	for _, c := range []byte("{}[]:, \n\r\t") {
		w[c] = 0
	}
	return w
}()

const (
	// keyWeight and valueWeight are the fixed costs of a member name and of
	// a string value (see scan).
	keyWeight   = 200
	valueWeight = 300
	idWeight    = 1000
	// leadWeight is a UTF-8 lead byte's (see byteWeight).
	leadWeight = 800
	// backslashWeight is an escape's: in tool output an escaped quote
	// stands for a token of JSON-in-a-string, and an escaped newline for
	// the newline and the indentation after it, which as spaces weighs
	// nothing (fitted with TestEstimatorError).
	backslashWeight = 700

	// blobRatio and blobCap price opaque base64 blobs (see above).
	blobRatio = 48
	blobCap   = 2000

	// openAIOverhead is the reply priming of a chat prompt (OpenAI's
	// cookbook: every reply is primed with 3 tokens).
	openAIOverhead = 3
	// anthropicToolOverhead is the system prompt Anthropic adds when a
	// request carries tools (documented per model at 313–346 tokens for
	// tool_choice auto/none); 300 fits the recorded pairs once the tools'
	// own JSON is counted.
	anthropicToolOverhead = 300
	// anthropicScale (per mille) reflects that Claude's tokenizer yields
	// more tokens than o200k on the same text and that Claude renders tool
	// use and tool result blocks verbosely; fitted on the recorded pairs.
	anthropicScale = 1200
)

// blobKeys name JSON members whose string values are opaque blobs.
var blobKeys = [][]byte{
	[]byte("encrypted_content"),
	[]byte("signature"),
	[]byte("data"),
	[]byte("url"),
	[]byte("image_url"),
	[]byte("file_data"),
}

// Estimate returns the estimated input tokens of a model request body of
// the given API. It never fails: a body that is not JSON gets an estimate as
// text. It does not allocate.
func Estimate(api wire.API, body []byte) int64 {
	w, tools := scan(body, api != wire.APIMessages)
	return finish(api, w, tools)
}

// NeedsRewrite reports whether a request body goes over the watermark, with
// the estimate it decided on. It is meant for every call: one pass over the
// body, no JSON tree, no allocation. A watermark <= 0 means no watermark.
//
// When even the most a body of its size can weigh fits the watermark (a
// large-window model), it decides without reading the body and returns
// that bound as the estimate; when the most its byte classes can weigh
// fits (a count, cheaper than following the JSON: prose is mostly letters
// and spaces), it decides on that bound. When the body goes over the watermark, it
// stops reading where it does and returns the estimate of what it read:
// the rest could only add to it.
func NeedsRewrite(api wire.API, body []byte, watermark int64) (estimate int64, needs bool) {
	if bound := upperBound(api, len(body)); watermark <= 0 || bound <= watermark {
		return bound, false
	}
	if bound, ok := classFits(api, body, watermark); ok {
		return bound, false
	}
	w, tools := scanUntil(body, api != wire.APIMessages, fitWeight(api, watermark))
	est := finish(api, w, tools)
	return est, est > watermark
}

// EstimateCache makes NeedsRewrite cheap on a run's next call: an agent
// sends its whole history every time, so a body usually begins with the
// previous body up to the end of its conversation array ("messages" or
// "input"). The cache keeps that prefix's length, hash and scan state;
// when the next body begins with the same bytes (checked by hash, about
// twenty times faster than weighing them), only the rest is read. Any
// other body is read whole. It belongs to one run, under its lock; its
// zero value is empty.
type EstimateCache struct {
	cut   int // length of the prefix; 0: none
	hash  uint64
	w     int64
	tools bool
	// noClass: the class bound did not decide this run's last body read
	// whole. A run's bodies grow, so it would not decide the next either.
	noClass  bool
	lastKey  [32]byte
	lastKeyN int
}

// NeedsRewrite is the package's NeedsRewrite, reading only what follows
// the cached prefix when the body begins with it, and caching this body's
// prefix for the next call. The decision is the same; so is the estimate
// when the body is read to its end.
func (c *EstimateCache) NeedsRewrite(api wire.API, body []byte, watermark int64) (estimate int64, needs bool) {
	if bound := upperBound(api, len(body)); watermark <= 0 || bound <= watermark {
		return bound, false
	}
	var h xxh3.Hasher
	st := c.resume(body, &h)
	if st.i == 0 && !c.noClass {
		if bound, ok := classFits(api, body, watermark); ok {
			// Nothing is cached from this body: the next one is decided
			// as this one was, which costs no more.
			return bound, false
		}
		c.noClass = true
	}
	est := c.scan(api, body, fitWeight(api, watermark), &st, &h)
	return est, est > watermark
}

// Estimate is the package's Estimate, reading only what follows the cached
// prefix when the body begins with it, and caching this body's prefix for
// the next call: the same number for a fraction of the reading.
func (c *EstimateCache) Estimate(api wire.API, body []byte) int64 {
	var h xxh3.Hasher
	st := c.resume(body, &h)
	return c.scan(api, body, math.MaxInt64, &st, &h)
}

// resume returns the scan state at the end of the cached prefix when body
// begins with it (h then holds the prefix), else the start.
func (c *EstimateCache) resume(body []byte, h *xxh3.Hasher) scanState {
	if c.cut > 0 && c.cut < len(body) {
		_, _ = h.Write(body[:c.cut])
		if h.Sum64() == c.hash {
			return scanState{i: c.cut, w: c.w, tools: c.tools, lastKey: c.lastKey[:c.lastKeyN], depth: 2, conv: true}
		}
		h.Reset()
	}
	return scanState{}
}

// scan reads body on from st up to the weight stop, caches the prefix up
// to the end of its conversation array when the read got there, and
// returns the estimate of what it read.
func (c *EstimateCache) scan(api wire.API, body []byte, stop int64, st *scanState, h *xxh3.Hasher) int64 {
	from := st.i
	w, tools := scanFrom(body, api != wire.APIMessages, stop, st)
	if st.cut > from && len(st.cutKey) <= len(c.lastKey) {
		_, _ = h.Write(body[from:st.cut])
		c.cut, c.hash, c.w, c.tools = st.cut, h.Sum64(), st.cutW, st.cutTools
		c.lastKeyN = copy(c.lastKey[:], st.cutKey)
	}
	return finish(api, w, tools)
}

// fitWeight returns the largest weight finish keeps within wm (without the
// tools overhead, which only adds): a scan past it is over wm.
func fitWeight(api wire.API, wm int64) int64 {
	if finish(api, 0, false) > wm {
		return -1
	}
	// finish is monotone in the weight, and one token more than wm
	// already weighs over it.
	lo, hi := int64(0), (wm+1)*weightScale
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if finish(api, mid, false) <= wm {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// maxWeightPerByte bounds scan's weight per byte of body: the heaviest
// byte is a UTF-8 lead byte (leadWeight), which a malformed body may carry
// alone; a backslash weighs backslashWeight; an empty id value weighs
// idWeight over its two quotes (500 per byte), member names and string
// values less.
const maxWeightPerByte = leadWeight

// upperBound is the most Estimate can return for a body of n bytes.
func upperBound(api wire.API, n int) int64 {
	return finish(api, int64(n)*maxWeightPerByte, true)
}

// The byte classes of classBound and the most scan can give one byte of
// each. Letters weigh 270 and white space and control bytes nothing,
// inside strings and out. Other ASCII bytes weigh at most backslashWeight
// as text; a quote carries at most half of the fixed cost of its string (idWeight of
// an id value over its two quotes: 500; valueWeight and keyWeight less).
// A non-ASCII byte is at most a UTF-8 lead byte. One string may be left
// open at the end of a body, its single quote carrying the whole idWeight:
// classBound adds that once.
const (
	lowClassWeight  = 270
	midClassWeight  = max(500, backslashWeight)
	highClassWeight = leadWeight
)

// sumLanes adds the eight bytes of x.
func sumLanes(x uint64) int {
	const lo16 = 0x00ff00ff00ff00ff
	x = x&lo16 + x>>8&lo16 // four lanes of 16 bits: no overflow
	return int(x * 0x0001000100010001 >> 48)
}

// classFits returns classBound and whether it fits wm, without counting
// when even a body of letters and spaces could not fit.
func classFits(api wire.API, body []byte, wm int64) (int64, bool) {
	if finish(api, int64(len(body))*lowClassWeight+idWeight, true) > wm {
		return 0, false
	}
	bound := classBound(api, body)
	return bound, bound <= wm
}

// classBound is the most Estimate can return for body, from a count of its
// byte classes: prose is mostly letters and spaces, so the count often
// proves a fit without weighing, which must follow the JSON and costs
// several times the count (BenchmarkClassBound).
func classBound(api wire.API, body []byte) int64 {
	low, high := countClasses(body)
	mid := len(body) - low - high
	w := int64(low)*lowClassWeight + int64(mid)*midClassWeight + int64(high)*highClassWeight + idWeight
	return finish(api, w, true)
}

// scan walks a JSON body once and returns its weight in weightScale units,
// and whether it offers tools (a "tools" member with a non-empty array).
// Member names cost keyWeight whatever their length: the provider renders
// the envelope ("role", "content", "type", schema keywords) into a few
// template tokens, not into the JSON text. String values cost the weight of
// their bytes plus valueWeight. Bytes outside strings cost only when they
// are numbers or literals. Long values of blob members are priced as blobs.
//
// With cheapIDs (OpenAI), the values of id members cost idWeight: OpenAI
// does not render call and item ids into the prompt as text (measured: a
// Responses round trip carrying three 50-byte ids costs no more than its
// text), while Anthropic does render tool_use ids.
func scan(b []byte, cheapIDs bool) (w int64, tools bool) {
	return scanUntil(b, cheapIDs, math.MaxInt64)
}

// scanUntil is scan, stopping once the weight is over stop.
func scanUntil(b []byte, cheapIDs bool, stop int64) (w int64, tools bool) {
	var st scanState
	return scanFrom(b, cheapIDs, stop, &st)
}

// scanState is where a scan stands, so that one can resume from the end
// of a conversation array seen before (EstimateCache): the position, the
// weight and tools so far, the last member name, the nesting depth and
// whether the current array is the conversation. cut, cutW and cutTools
// are noted at the conversation's closing bracket (cut 0: not reached).
type scanState struct {
	i        int
	w        int64
	tools    bool
	lastKey  []byte
	depth    int
	conv     bool
	cut      int
	cutW     int64
	cutTools bool
	cutKey   []byte
}

// scanFrom is scanUntil from the state st, which it updates.
func scanFrom(b []byte, cheapIDs bool, stop int64, st *scanState) (int64, bool) {
	i, w, tools, lastKey, depth := st.i, st.w, st.tools, st.lastKey, st.depth
	defer func() { st.i, st.w, st.tools, st.lastKey, st.depth = i, w, tools, lastKey, depth }()
	for i < len(b) {
		c := b[i]
		if c != '"' {
			switch c {
			case '{', '[':
				depth++
			case '}':
				depth--
			case ']':
				if depth == 2 && st.conv {
					st.conv = false
					st.cut, st.cutW, st.cutTools, st.cutKey = i, w, tools, lastKey
				}
				depth--
			}
			w += int64(outerWeight[c])
			i++
			continue
		}
		start := i + 1
		sw, end := weighString(b, start)
		s := b[start:end]
		i = end + 1
		j := skipWS(b, i)
		if j < len(b) && b[j] == ':' {
			w += keyWeight
			lastKey = s
			i = j + 1
			if len(s) == 5 && string(s) == "tools" {
				k := skipWS(b, i)
				if k < len(b) && b[k] == '[' {
					k = skipWS(b, k+1)
					tools = tools || (k < len(b) && b[k] != ']')
				}
			}
			if depth == 1 && (string(s) == "messages" || string(s) == "input") {
				k := skipWS(b, i)
				st.conv = k < len(b) && b[k] == '['
			}
			continue
		}
		if cheapIDs && isIDKey(lastKey) {
			w += idWeight
			continue
		}
		if len(s) >= 256 && isBlobKey(lastKey) {
			price := int64(len(s)/blobRatio) * weightScale
			if price > blobCap*weightScale {
				price = blobCap * weightScale
			}
			if price < sw {
				sw = price
			}
		}
		w += sw + valueWeight
		if w > stop {
			// Checked at string values only: they are nearly all of the
			// weight, and a check per byte would cost more than it saves.
			return w, tools
		}
	}
	return w, tools
}

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// weighString weighs the contents of the string starting at b[start] and
// returns the index of its closing quote (len(b) when it is not closed):
// jsonscan.SkipString finds the quote, weigh weighs what lies before it.
func weighString(b []byte, start int) (w int64, end int) {
	end = jsonscan.SkipString(unsafe.String(unsafe.SliceData(b), len(b)), start-1) - 1
	if end < 0 {
		end = len(b)
	}
	return weigh(b[start:end]), end
}

func isIDKey(k []byte) bool {
	switch string(k) {
	case "id", "call_id", "tool_call_id":
		return true
	}
	return false
}

func isBlobKey(k []byte) bool {
	for _, bk := range blobKeys {
		if bytes.Equal(k, bk) {
			return true
		}
	}
	return false
}

// weigh sums the byte weights of b, in weightScale units.
func weigh(b []byte) int64 {
	// Four accumulators break the dependency chain of a single sum.
	var s0, s1, s2, s3 uint64
	for len(b) >= 4 {
		s0 += uint64(byteWeight[b[0]])
		s1 += uint64(byteWeight[b[1]])
		s2 += uint64(byteWeight[b[2]])
		s3 += uint64(byteWeight[b[3]])
		b = b[4:]
	}
	for _, c := range b {
		s0 += uint64(byteWeight[c])
	}
	return int64(s0 + s1 + s2 + s3)
}

func isWS(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// finish turns a weight sum into tokens with the API's fixed overheads.
func finish(api wire.API, w int64, tools bool) int64 {
	if w < 0 {
		w = 0
	}
	tokens := (w + weightScale - 1) / weightScale
	switch api {
	case wire.APIMessages:
		tokens = tokens * anthropicScale / 1000
		if tools {
			tokens += anthropicToolOverhead
		}
	default:
		tokens += openAIOverhead
	}
	return tokens
}
