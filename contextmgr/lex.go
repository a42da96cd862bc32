package contextmgr

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Byte-level primitives of the package's JSON reading. Strings are read
// eight bytes at a time (SWAR): agent traffic is mostly long strings, and
// tool output embedded as a JSON string carries an escape every few bytes
// (\" and \n of logs and JSON), so the common escapes are handled a word
// at a time rather than by leaving the word loop for each.

// span is a value's bytes [s, e) in the buffer it was read from, and the
// weight scan gives it there (set by the reader for the values it keeps).
type span struct {
	s, e int
	w    int64
}

func (v span) ok() bool { return v.e > v.s }

const (
	swarLo = 0x0101010101010101
	swarHi = 0x8080808080808080
	swar7f = 0x7f7f7f7f7f7f7f7f
)

// byteMask returns x's bytes equal to c flagged in their high bit (the
// classic SWAR zero-byte test on x XOR c repeated); above the lowest true
// match a flag may be spurious. It is the cheap test for "any match".
func byteMask(x uint64, c byte) uint64 {
	v := x ^ (swarLo * uint64(c))
	return (v - swarLo) &^ v & swarHi
}

// ctrlLoose flags x's bytes below 0x20 as byteMask flags its matches.
func ctrlLoose(x uint64) uint64 {
	return (x - swarLo*0x20) &^ x & swarHi
}

// eqMask returns exactly x's bytes equal to c, flagged in their high bit.
func eqMask(x uint64, c byte) uint64 {
	v := x ^ (swarLo * uint64(c))
	return ^((v&swar7f + swar7f) | v) & swarHi
}

// ctrlMask returns exactly x's bytes below 0x20.
func ctrlMask(x uint64) uint64 {
	return ^((x&swar7f + swarLo*0x60) | x) & swarHi
}

// compact gathers the flags of a mask into bits 0–7 (byte k to bit k): the
// multiplier's terms land the eight flags on distinct bits of the top byte.
func compact(m uint64) uint {
	return uint(((m >> 7) * 0x0102040810204080) >> 56)
}

// weigh8 sums the byte weights of p. The bytes are loaded from memory one
// by one rather than shifted out of a word: a load and a table lookup a
// byte is about half the instructions.
func weigh8(p *[8]byte) uint64 {
	return uint64(byteWeight[p[0]]) + uint64(byteWeight[p[1]]) +
		uint64(byteWeight[p[2]]) + uint64(byteWeight[p[3]]) +
		uint64(byteWeight[p[4]]) + uint64(byteWeight[p[5]]) +
		uint64(byteWeight[p[6]]) + uint64(byteWeight[p[7]])
}

// escapeOK marks the bytes a backslash may escape.
var escapeOK = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true, 'u': true}

// validEscape reports whether the escape whose backslash is at b[p-1] is
// valid JSON.
func validEscape(b []byte, p int) bool {
	if p >= len(b) || !escapeOK[b[p]] {
		return false
	}
	return b[p] != 'u' || len(b)-p >= 5 && ishex(b[p+1]) && ishex(b[p+2]) && ishex(b[p+3]) && ishex(b[p+4])
}

// lexString reads the JSON string whose opening quote is at b[i]. It
// returns the index after the closing quote, the weight of its contents
// (what weighString returns), whether they hold escapes, and false when the
// string is not valid JSON (a control character, a bad escape, no closing
// quote).
func lexString(b []byte, i int) (end int, w uint64, esc, ok bool) {
	i++
	var s uint64
	// pend: b[i] is escaped by the backslash before it; check: and that
	// escape is still to be validated.
	var pend, check uint
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		mq, mb, mc := byteMask(x, '"'), byteMask(x, '\\'), ctrlLoose(x)
		if mq|mb|mc == 0 && check == 0 {
			s += weigh8((*[8]byte)(b[i : i+8]))
			i += 8
			pend = 0
			continue
		}
		var bs uint
		if mb != 0 {
			bs = compact(eqMask(x, '\\'))
		}
		if bs&(bs<<1|pend) == 0 {
			// Lone backslashes only: each escapes the byte after it.
			escaped := bs<<1 | pend
			n := 8 // bytes of the word inside the string
			var qa uint
			if mq != 0 {
				qa = compact(eqMask(x, '"'))
				if q := qa &^ escaped & 0xff; q != 0 {
					n = bits.TrailingZeros(q)
				}
			}
			in := uint(1)<<n - 1
			if mc != 0 && compact(ctrlMask(x))&in != 0 {
				return i, 0, false, false
			}
			// The escapes of this word (and the one carried in) are
			// checked here; one whose escaped byte is in the next word is
			// carried over. \" and \n, the bulk of embedded logs and JSON,
			// are told valid by mask.
			bsIn := bs & in
			esc = esc || bsIn != 0
			ep := (bsIn<<1 | check) & 0xff
			if ep != 0 && ep&^(qa|compact(eqMask(x, 'n'))) != 0 {
				for m := ep; m != 0; m &= m - 1 {
					if !validEscape(b, i+bits.TrailingZeros(m)) {
						return i, 0, false, false
					}
				}
			}
			if n < 8 {
				for k := range n {
					s += uint64(byteWeight[b[i+k]])
				}
				return i + n + 1, s, esc, true
			}
			s += weigh8((*[8]byte)(b[i : i+8]))
			i += 8
			pend = escaped >> 8
			check = pend
			continue
		}
		// Runs of backslashes: byte by byte through this word.
		if check != 0 && !validEscape(b, i) {
			return i, 0, false, false
		}
		check = 0
		var st lexEnd
		if i, s, pend, esc, st = lexBytes(b, i, i+8, s, pend, esc); st != lexOn {
			return lexResult(i, s, esc, st)
		}
	}
	if check != 0 && !validEscape(b, i) {
		return i, 0, false, false
	}
	var st lexEnd
	if i, s, _, esc, st = lexBytes(b, i, len(b), s, pend, esc); st != lexOn {
		return lexResult(i, s, esc, st)
	}
	return len(b), 0, false, false
}

// lexEnd is where lexBytes stopped.
type lexEnd int

const (
	lexOn     lexEnd = iota // at e: the string goes on
	lexClosed               // at the closing quote
	lexBad                  // at a control character or a bad escape
)

// lexBytes is lexString's byte-by-byte step over b[i:e], for words with
// runs of backslashes and the last bytes.
func lexBytes(b []byte, i, e int, s uint64, pend uint, esc bool) (int, uint64, uint, bool, lexEnd) {
	for ; i < e; i++ {
		c := b[i]
		s += uint64(byteWeight[c])
		switch {
		case pend != 0:
			pend = 0
		case c == '"':
			return i, s, pend, esc, lexClosed
		case c < ' ':
			return i, s, pend, esc, lexBad
		case c == '\\':
			if !validEscape(b, i+1) {
				return i, s, pend, esc, lexBad
			}
			esc, pend = true, 1
		}
	}
	return e, s, pend, esc, lexOn
}

// lexResult is lexString's answer where lexBytes stopped at i.
func lexResult(i int, s uint64, esc bool, st lexEnd) (int, uint64, bool, bool) {
	if st == lexClosed {
		return i + 1, s - uint64(byteWeight['"']), esc, true
	}
	return i, 0, false, false
}

// appendUnescaped appends the decoded contents of a JSON string (s is
// between the quotes), exactly as gjson decodes it.
func appendUnescaped(dst, s []byte) []byte {
	// Decoding never lengthens: write in place into room for s, plus a
	// word of slack for whole-word stores.
	n := len(dst)
	dst = slices.Grow(dst, len(s)+8)[:n+len(s)+8]
	out := dst[n:]
	i, j := 0, 0
	for {
		for i+8 <= len(s) {
			x := binary.LittleEndian.Uint64(s[i:])
			mb, mc := byteMask(x, '\\'), ctrlLoose(x)
			if mb|mc == 0 {
				binary.LittleEndian.PutUint64(out[j:], x)
				i += 8
				j += 8
				continue
			}
			if mc != 0 {
				break
			}
			// Lone backslashes with one-letter escapes, the bulk of
			// embedded text: the word's pieces between them are stored
			// whole (a store of the shifted word; what it writes past the
			// piece is overwritten next), each escape as its letter.
			bs := compact(eqMask(x, '\\'))
			if bs&(bs<<1) != 0 {
				break
			}
			lim := 8
			if bs&0x80 != 0 {
				// Its letter is in the next word: leave it to that word.
				lim, bs = 7, bs&0x7f
			}
			start := 0
			for m := bs; m != 0; m &= m - 1 {
				p := bits.TrailingZeros(m)
				e := unescapeByte[byte(x>>(8*(p+1)))]
				if e == 0 {
					break
				}
				binary.LittleEndian.PutUint64(out[j:], x>>(8*start))
				j += p - start
				out[j] = e
				j++
				start = p + 2
				bs &= bs - 1
			}
			if bs != 0 {
				// A \u or an invalid escape: from its backslash on, the
				// escapes are read one by one.
				i += start
				break
			}
			binary.LittleEndian.PutUint64(out[j:], x>>(8*start))
			j += lim - start
			i += lim
		}
		// One byte, or one escape, at a time.
		if i >= len(s) {
			return dst[:n+j]
		}
		c := s[i]
		if c >= ' ' && c != '\\' {
			out[j] = c
			i++
			j++
			continue
		}
		if c < ' ' {
			return dst[:n+j]
		}
		i++
		if i >= len(s) {
			return dst[:n+j]
		}
		switch s[i] {
		default:
			return dst[:n+j]
		case '\\':
			out[j] = '\\'
		case '/':
			out[j] = '/'
		case 'b':
			out[j] = '\b'
		case 'f':
			out[j] = '\f'
		case 'n':
			out[j] = '\n'
		case 'r':
			out[j] = '\r'
		case 't':
			out[j] = '\t'
		case '"':
			out[j] = '"'
		case 'u':
			if i+5 > len(s) {
				return dst[:n+j]
			}
			r := hex4(s[i+1:])
			i += 5
			if r >= 0xD800 && r < 0xDC00 {
				if len(s[i:]) >= 6 && s[i] == '\\' && s[i+1] == 'u' {
					r2 := hex4(s[i+2:])
					if r2 >= 0xDC00 && r2 < 0xE000 {
						r = utf16.DecodeRune(r, r2)
						i += 6
					}
				}
			}
			j += utf8.EncodeRune(out[j:], r)
			continue
		}
		i++
		j++
	}
}

// unescapeByte maps the letter of a one-letter escape to what it stands
// for; 0 for the others.
var unescapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func hex4(s []byte) rune {
	n, _ := strconv.ParseUint(string(s[:4]), 16, 64)
	return rune(n)
}

// runeCount is utf8.RuneCount, with ASCII taken eight bytes at a time.
func runeCount(b []byte) int {
	n, i := 0, 0
	for i < len(b) {
		if i+8 <= len(b) && binary.LittleEndian.Uint64(b[i:])&swarHi == 0 {
			i += 8
			n += 8
			continue
		}
		if b[i] < utf8.RuneSelf {
			i++
			n++
			continue
		}
		_, size := utf8.DecodeRune(b[i:])
		i += size
		n++
	}
	return n
}
