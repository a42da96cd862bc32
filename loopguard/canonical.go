package loopguard

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/haltline/haltline/wire/jsonscan"
)

// span locates one canonical object member "key":value inside the output
// buffer while the members of that object are being collected for sorting.
type span struct{ start, keyEnd, end int }

// scratch is the per-call working memory, pooled so that canonicalisation
// allocates nothing in steady state.
type scratch struct {
	buf   []byte // hash input: domain prefix, ids, canonical bytes
	shape []byte // canonical bytes with digit runs masked
	alt   []byte // a second hash input over the same canonical bytes (Fingerprints)
	tmp   []byte // copy of an object's members while they are reordered
	str   []byte // decoded string content or folded text
	key   []byte // lower-cased key for the volatile-key lookup
	spans []span
}

// parser is a single-pass recursive-descent tokenizer that writes canonical
// JSON as it reads. It never builds a tree: values go straight to dst, and
// only object members are reordered in place once the object closes.
type parser struct {
	src      []byte
	text     string // src, read as a string by jsonscan (never copied)
	pos      int
	st       *scratch
	volatile *keySet
}

// canonical appends the canonical form of src to dst. Valid JSON becomes
// compact JSON with sorted keys, volatile members dropped, numbers in one
// spelling and volatile values inside strings replaced by placeholders.
// Anything else becomes a JSON string of the whitespace-folded, normalised
// text, so the result is always valid JSON and canonical(canonical(x)) is
// canonical(x).
func canonical(dst, src []byte, st *scratch, volatile *keySet) []byte {
	start := len(dst)
	p := parser{src: src, text: unsafe.String(unsafe.SliceData(src), len(src)), st: st, volatile: volatile}
	st.spans = st.spans[:0]
	p.skipWS()
	if p.pos < len(src) {
		out, ok := p.value(dst, 0)
		if ok {
			p.skipWS()
			if p.pos == len(src) {
				return out
			}
		}
		dst = out
	}
	st.spans = st.spans[:0]
	st.str = foldText(st.str[:0], src)
	return appendNormalized(dst[:start], st.str)
}

func (p *parser) skipWS() { p.pos = jsonscan.SkipWS(p.text, p.pos) }

func (p *parser) value(dst []byte, depth int) ([]byte, bool) {
	if p.pos >= len(p.src) || depth > jsonscan.MaxDepth {
		return dst, false
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object(dst, depth)
	case c == '[':
		return p.array(dst, depth)
	case c == '"':
		s, ok := p.str()
		if !ok {
			return dst, false
		}
		return appendNormalized(dst, s), true
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	}
	return dst, false
}

func (p *parser) literal(dst []byte, lit string) ([]byte, bool) {
	if len(p.src)-p.pos < len(lit) || string(p.src[p.pos:p.pos+len(lit)]) != lit {
		return dst, false
	}
	p.pos += len(lit)
	return append(dst, lit...), true
}

func (p *parser) array(dst []byte, depth int) ([]byte, bool) {
	p.pos++ // '['
	dst = append(dst, '[')
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		return append(dst, ']'), true
	}
	for {
		var ok bool
		p.skipWS()
		if dst, ok = p.value(dst, depth+1); !ok {
			return dst, false
		}
		p.skipWS()
		if p.pos >= len(p.src) {
			return dst, false
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
			dst = append(dst, ',')
		case ']':
			p.pos++
			return append(dst, ']'), true
		default:
			return dst, false
		}
	}
}

func (p *parser) object(dst []byte, depth int) ([]byte, bool) {
	p.pos++ // '{'
	dst = append(dst, '{')
	body := len(dst)
	base := len(p.st.spans)
	p.skipWS()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return append(dst, '}'), true
	}
	for {
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return dst, false
		}
		memberStart := len(dst)
		key, ok := p.str()
		if !ok {
			return dst, false
		}
		drop := p.isVolatileKey(key)
		dst = appendQuoted(dst, key)
		keyEnd := len(dst)
		p.skipWS()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return dst, false
		}
		p.pos++
		dst = append(dst, ':')
		p.skipWS()
		if dst, ok = p.value(dst, depth+1); !ok {
			return dst, false
		}
		if drop {
			dst = dst[:memberStart]
		} else {
			p.st.spans = append(p.st.spans, span{memberStart, keyEnd, len(dst)})
		}
		p.skipWS()
		if p.pos >= len(p.src) {
			return dst, false
		}
		if p.src[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.src[p.pos] != '}' {
			return dst, false
		}
		p.pos++
		break
	}
	members := p.st.spans[base:]
	p.st.spans = p.st.spans[:base]
	if len(members) == 0 {
		return append(dst[:body], '}'), true
	}
	// Members were written back to back; copy them aside and write them
	// again in key order with separators. Ties (duplicate keys) are broken
	// by the value so the order is total and the output deterministic.
	region := dst[body:]
	less := func(a, b span) int {
		ka, kb := region[a.start-body:a.keyEnd-body], region[b.start-body:b.keyEnd-body]
		if c := compareBytes(ka, kb); c != 0 {
			return c
		}
		return compareBytes(region[a.keyEnd-body:a.end-body], region[b.keyEnd-body:b.end-body])
	}
	if len(members) <= 12 {
		for i := 1; i < len(members); i++ {
			for j := i; j > 0 && less(members[j-1], members[j]) > 0; j-- {
				members[j-1], members[j] = members[j], members[j-1]
			}
		}
	} else {
		slices.SortFunc(members, less)
	}
	p.st.tmp = append(p.st.tmp[:0], region...)
	dst = dst[:body]
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p.st.tmp[m.start-body:m.end-body]...)
	}
	return append(dst, '}'), true
}

func compareBytes(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// isVolatileKey reports whether key names a member whose value changes on
// every call by design (timestamps, nonces, request ids). Most keys are
// rejected by length and first byte before the map is consulted; the
// lower-casing goes to scratch so the lookup does not allocate.
func (p *parser) isVolatileKey(key []byte) bool {
	ks := p.volatile
	if ks == nil || !ks.mayHold(key) {
		return false
	}
	k := p.st.key[:0]
	for _, c := range key {
		k = append(k, lower(c))
	}
	p.st.key = k
	_, ok := ks.m[string(k)]
	return ok
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// str reads a JSON string at p.pos (jsonscan.ValidString finds its end
// and checks it) and returns its decoded content (jsonscan.AppendUnescaped):
// a slice of the source when it has no escapes and is valid UTF-8,
// otherwise the scratch buffer (valid until the next call). Invalid UTF-8
// and lone surrogates become U+FFFD so that the output is always valid
// UTF-8.
func (p *parser) str() ([]byte, bool) {
	end := jsonscan.ValidString(p.text, p.pos)
	if end < 0 {
		return nil, false
	}
	body := p.src[p.pos+1 : end-1]
	p.pos = end
	if plainASCII(body) {
		return body, true
	}
	if bytes.IndexByte(body, '\\') < 0 {
		if utf8.Valid(body) {
			return body, true
		}
		p.st.str = append(p.st.str[:0], body...)
	} else {
		p.st.str = jsonscan.AppendUnescaped(p.st.str[:0], body)
	}
	if !utf8.Valid(p.st.str) {
		// Each invalid byte becomes U+FFFD (the decoded escapes are valid
		// and start no sequence a byte before them could complete).
		fixed := p.st.tmp[:0]
		for s := p.st.str; len(s) > 0; {
			r, size := utf8.DecodeRune(s)
			fixed = utf8.AppendRune(fixed, r)
			s = s[size:]
		}
		p.st.str, p.st.tmp = fixed, p.st.str
	}
	return p.st.str, true
}

// plainASCII reports whether the string body b (checked by ValidString)
// is its own text: ASCII without escapes, as most keys and values are.
// Eight bytes at a time, in one pass.
func plainASCII(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (ones * '\\')
		if (x|(q-ones)&^q)&highs != 0 {
			return false
		}
	}
	for ; i < len(b); i++ {
		if b[i] == '\\' || b[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Exponents are clamped so that absurd inputs ("1e999999999999999999") stay
// cheap; the printed exponent is clamped further so that re-reading the
// output yields the same output.
const (
	expParseLimit = 1 << 58 // ×10 + 9 still fits in int64
	expPrintLimit = 1 << 50
)

// number writes a JSON number in one spelling per value, computed exactly on
// the decimal digits (no float conversion, so 0.1 and 0.10000000000000001
// stay apart): 1.0, 1 and 1e0 all become 1; -0 becomes 0.
func (p *parser) number(dst []byte) ([]byte, bool) {
	s := p.src
	i := p.pos
	neg := false
	if s[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return dst, false
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == fracStart {
			return dst, false
		}
		fracEnd = i
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		es := i
		for i < len(s) && isDigit(s[i]) {
			if exp < expParseLimit {
				exp = min(exp*10+int64(s[i]-'0'), expParseLimit)
			}
			i++
		}
		if i == es {
			return dst, false
		}
		if expNeg {
			exp = -exp
		}
	}
	p.pos = i

	nInt, nFrac := intEnd-intStart, fracEnd-fracStart
	total := nInt + nFrac
	digit := func(k int) byte {
		if k < nInt {
			return s[intStart+k]
		}
		return s[fracStart+k-nInt]
	}
	first := 0
	for first < total && digit(first) == '0' {
		first++
	}
	if first == total {
		return append(dst, '0'), true
	}
	last := total - 1
	for digit(last) == '0' {
		last--
	}
	nd := last - first + 1
	e10 := exp - int64(nFrac) + int64(total-1-last) // value = digits × 10^e10
	point := int64(nd) + e10                        // value = 0.digits × 10^point
	if neg {
		dst = append(dst, '-')
	}
	switch {
	case e10 >= 0 && point <= 21:
		for k := first; k <= last; k++ {
			dst = append(dst, digit(k))
		}
		for ; e10 > 0; e10-- {
			dst = append(dst, '0')
		}
	case e10 < 0 && point > 0:
		for k := first; k <= last; k++ {
			if int64(k-first) == point {
				dst = append(dst, '.')
			}
			dst = append(dst, digit(k))
		}
	case e10 < 0 && point > -6:
		dst = append(dst, '0', '.')
		for z := point; z < 0; z++ {
			dst = append(dst, '0')
		}
		for k := first; k <= last; k++ {
			dst = append(dst, digit(k))
		}
	default:
		dst = append(dst, digit(first))
		if nd > 1 {
			dst = append(dst, '.')
			for k := first + 1; k <= last; k++ {
				dst = append(dst, digit(k))
			}
		}
		e := point - 1
		dst = append(dst, 'e')
		if e < 0 {
			dst = append(dst, '-')
			e = -e
		} else {
			dst = append(dst, '+')
		}
		dst = appendInt(dst, min(e, expPrintLimit))
	}
	return dst, true
}

func appendInt(dst []byte, v int64) []byte {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// foldText turns arbitrary bytes into valid UTF-8 with every run of white
// space folded to one space and the ends trimmed, so that a tool result that
// differs only in line endings or indentation hashes the same.
func foldText(dst, src []byte) []byte {
	dst, _, _ = foldBytes(dst, src, 0, len(src), false)
	return dst
}

// foldBytes is foldText's loop a byte at a time from src[i] (space: white
// space came before it, not yet written), until it reaches end or passes
// it with a run or a character.
func foldBytes(dst, src []byte, i, end int, space bool) ([]byte, int, bool) {
	for i < end {
		c := src[i]
		if c < utf8.RuneSelf {
			if isASCIISpace(c) {
				space = true
				i++
				continue
			}
			// A run of ASCII other than white space goes out in one copy.
			j := i + 1
			for {
				j = skipWord(src, j)
				if j < len(src) && src[j] < ' ' && !isASCIISpace(src[j]) {
					j++ // a control byte other than white space: part of the run
					continue
				}
				break
			}
			if space && len(dst) > 0 {
				dst = append(dst, ' ')
			}
			space = false
			dst = append(dst, src[i:j]...)
			i = j
			continue
		}
		dst, i, space = foldRune(dst, src, i, space)
	}
	return dst, i, space
}

// foldRune folds the character at src[i], not ASCII, into dst as foldText
// does (space: white space came before it, not yet written), and returns
// the index after it. An invalid byte becomes U+FFFD.
func foldRune(dst, src []byte, i int, space bool) ([]byte, int, bool) {
	r, size := utf8.DecodeRune(src[i:])
	i += size
	if unicode.IsSpace(r) {
		return dst, i, true
	}
	if space && len(dst) > 0 {
		dst = append(dst, ' ')
	}
	return utf8.AppendRune(dst, r), i, false
}

// skipWord returns the index of the first byte from i on that is a space,
// a control byte or a byte of a multi-byte character; len(s) if none.
// Eight bytes at a time: foldText's runs are most of a text tool result.
func skipWord(s []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		// Bytes up to ' ', then bytes from 0x80; a borrow only runs
		// upward, so the lowest mark is exact.
		if m := ((x-ones*0x21)&^x | x) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s) && s[i] > ' ' && s[i] < utf8.RuneSelf; i++ {
	}
	return i
}

func isASCIISpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// appendQuoted writes s as a JSON string with minimal escaping and no value
// normalisation (used for object keys).
func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	for {
		i := 0
		for i < len(s) && byteClass[s[i]] != clEscape {
			i++
		}
		dst = append(dst, s[:i]...)
		if i == len(s) {
			return append(dst, '"')
		}
		dst = appendEscaped(dst, s[i])
		s = s[i+1:]
	}
}

const hexDigits = "0123456789abcdef"

// appendEscaped writes one byte of already valid UTF-8 content with the
// minimal JSON escaping: quote, backslash and control characters only.
func appendEscaped(dst []byte, c byte) []byte {
	switch {
	case c == '"' || c == '\\':
		return append(dst, '\\', c)
	case c >= 0x20:
		return append(dst, c)
	case c == '\n':
		return append(dst, '\\', 'n')
	case c == '\r':
		return append(dst, '\\', 'r')
	case c == '\t':
		return append(dst, '\\', 't')
	case c == '\b':
		return append(dst, '\\', 'b')
	case c == '\f':
		return append(dst, '\\', 'f')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
}
