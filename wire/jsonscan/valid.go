package jsonscan

import (
	"math/bits"
	"strings"
)

// Valid reports whether s is one JSON value with optional white space
// around it: the grammar gjson.Valid accepts (RFC 8259; bytes are not
// checked for UTF-8).
func Valid(s string) bool {
	i := ValidValue(s, SkipWS(s, 0))
	return i >= 0 && SkipWS(s, i) == len(s)
}

// ValidValue returns the index past the JSON value starting at s[i] (no
// white space before it), or -1 when s holds no valid value there. It is
// one iterative pass: deep nesting costs a byte per level, never stack
// frames (gjson.Valid recurses), and strings are read by ValidString.
// Containers nested deeper than MaxDepth are not valid.
func ValidValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '{', '[':
		return validContainer(s, i)
	case '"':
		return ValidString(s, i)
	}
	return validScalar(s, i)
}

// validScalar returns the end of the number or literal at s[i], or -1.
func validScalar(s string, i int) int {
	switch s[i] {
	case 't':
		if len(s)-i < 4 || s[i:i+4] != "true" {
			return -1
		}
		return i + 4
	case 'f':
		if len(s)-i < 5 || s[i:i+5] != "false" {
			return -1
		}
		return i + 5
	case 'n':
		if len(s)-i < 4 || s[i:i+4] != "null" {
			return -1
		}
		return i + 4
	}
	return validNumber(s, i)
}

// validContainer is ValidValue for an object or an array.
func validContainer(s string, i int) int {
	var stackBuf [MaxDepth]byte
	stack := stackBuf[:0] // '{' or '[' per open container
	for {
		// A value at s[i].
		if i >= len(s) {
			return -1
		}
		switch c := s[i]; c {
		case '{', '[':
			if len(stack) == MaxDepth {
				return -1
			}
		}
		switch c := s[i]; c {
		case '{':
			i = SkipWS(s, i+1)
			if i < len(s) && s[i] == '}' {
				i++
				break
			}
			stack = append(stack, '{')
			if i = validKey(s, i); i < 0 {
				return -1
			}
			continue
		case '[':
			i = SkipWS(s, i+1)
			if i < len(s) && s[i] == ']' {
				i++
				break
			}
			stack = append(stack, '[')
			continue
		case '"':
			if i = ValidString(s, i); i < 0 {
				return -1
			}
		default:
			if i = validScalar(s, i); i < 0 {
				return -1
			}
		}
		// After a value: close containers, or go on to the next value.
		for {
			if len(stack) == 0 {
				return i
			}
			i = SkipWS(s, i)
			if i >= len(s) {
				return -1
			}
			top := stack[len(stack)-1]
			if s[i] == ',' {
				i = SkipWS(s, i+1)
				if top == '{' {
					if i = validKey(s, i); i < 0 {
						return -1
					}
				}
				break
			}
			if top == '{' && s[i] == '}' || top == '[' && s[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return -1
		}
	}
}

// validKey reads a member name and its colon at s[i]; it returns the index
// of the value (white space skipped), or -1.
func validKey(s string, i int) int {
	if i >= len(s) || s[i] != '"' {
		return -1
	}
	if i = ValidString(s, i); i < 0 {
		return -1
	}
	i = SkipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		return -1
	}
	return SkipWS(s, i+1)
}

// escapes classifies the byte after a backslash: 1 for the one-byte
// escapes, 5 for u (four hex digits follow), 0 for anything invalid.
var escapes = [256]uint8{'"': 1, '\\': 1, '/': 1, 'b': 1, 'f': 1, 'n': 1, 'r': 1, 't': 1, 'u': 5}

// ValidString returns the index past the string literal starting at s[i]
// (a quote), or -1 when it is unterminated or holds a control byte or a
// bad escape.
//
// Where escapes are few it jumps from one to the next, and to the closing
// quote, with strings.IndexByte (vectorised), testing the bytes in between
// for control bytes (validSparse). Tool output echoed in a history
// is often JSON itself, though, with an escaped quote every few bytes,
// where each jump would cost a call and a mispredicted branch: once
// escapes come that close it goes on with validDense.
func ValidString(s string, i int) int {
	i++
	// Most strings are short (keys, ids, roles, numbers as text): a few
	// words often hold the closing quote with nothing to check before it,
	// where strings.IndexByte's setup would cost more than the search.
	for w := 0; w < shortWords && i+8 <= len(s); w++ {
		m := special(load64(s, i))
		if m == 0 {
			i += 8
			continue
		}
		// The lowest mark is exact (a borrow only runs upward).
		j := i + bits.TrailingZeros64(m)>>3
		if s[j] == '"' {
			return j + 1
		}
		i = j // a backslash or a control byte: the loop below decides
		break
	}
	return validSparse(s, i)
}

// validSparse is ValidString from s[i] (inside the string, not escaped),
// where escapes are few.
func validSparse(s string, i int) int {
	from, escs := i, 0
	for {
		q := strings.IndexByte(s[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		// Escapes before the quote (one may escape it).
		for i <= q {
			b := strings.IndexByte(s[i:q], '\\')
			if b < 0 {
				if hasControl(s[i:q]) {
					return -1
				}
				return q + 1
			}
			b += i
			if hasControl(s[i:b]) || b+1 >= len(s) || !escapeAt(s, b+1) {
				return -1
			}
			i = b + 1 + int(escapes[s[b+1]])
			if escs++; escs >= 4 && i-from < escs*24 {
				return validDense(s, i)
			}
		}
	}
}

// hasControl reports whether s holds a byte below 0x20, in machine words:
// validSparse's check.
func hasControl(s string) bool {
	var acc uint64
	i := 0
	for ; i+32 <= len(s); i += 32 {
		a, b, c, d := load64(s, i), load64(s, i+8), load64(s, i+16), load64(s, i+24)
		acc |= (a-lsb*' ')&^a | (b-lsb*' ')&^b | (c-lsb*' ')&^c | (d-lsb*' ')&^d
	}
	for ; i+8 <= len(s); i += 8 {
		a := load64(s, i)
		acc |= (a - lsb*' ') &^ a
	}
	if acc&msb != 0 {
		return true
	}
	for ; i < len(s); i++ {
		if s[i] < ' ' {
			return true
		}
	}
	return false
}

// validDense is ValidString from s[i], a byte that no backslash escapes,
// for text dense in escapes. Which bytes are escaped is worked out with bit
// arithmetic on masks of the quotes and backslashes (simdjson's
// odd-backslash-run method), sixteen bytes a step in machine words. The
// loops only branch where the string ends, on an error, or on an escape
// other than \" and \\.
func validDense(s string, i int) int { return validDenseWords(s, i, 0) }

// validDenseWords is validDense in machine words, from s[i] with the carry
// of the bytes before it (1 when they ended in an odd backslash run).
func validDenseWords(s string, i int, carry uint64) int {
	quiet := false // the last sixteen bytes held nothing to look at
	for i+16 <= len(s) {
		x, y := load64(s, i), load64(s, i+8)
		if quiet {
			// In plain text a cheaper test says whether to look closer.
			if special(x)|special(y) == 0 {
				i += 16
				continue
			}
			quiet = false
		}
		qx, bx, qy, by := eqMask(x, '"'), eqMask(x, '\\'), eqMask(y, '"'), eqMask(y, '\\')
		cx, cy := (x-lsb*' ')&^x&msb, (y-lsb*' ')&^y&msb
		if qx|bx|cx|qy|by|cy|carry == 0 {
			quiet = true
			i += 16
			continue
		}
		Q, B := gather(qx)|gather(qy)<<8, gather(bx)|gather(by)<<8
		var esc uint64
		esc, carry = escaped(B, carry, 16)
		upto := uint64(0xFFFF)
		if end := Q &^ esc; end != 0 {
			upto = end&-end - 1
		}
		if cx|cy != 0 {
			// The lowest mark of each word is exact: a control byte
			// in the string, unless the string ended before it.
			if c := gather(cx) | gather(cy)<<8; c&-c&upto != 0 {
				return -1
			}
		}
		if other := esc &^ (Q | B) & upto; other != 0 && !otherEscapes(s, i, other) {
			return -1
		}
		if upto != 0xFFFF {
			return i + bits.TrailingZeros64(upto+1) + 1
		}
		i += 16
	}
	for i+8 <= len(s) {
		x := load64(s, i)
		q, b := eqMask(x, '"'), eqMask(x, '\\')
		ctl := (x - lsb*' ') &^ x & msb // lowest mark exact
		if q|b|ctl|carry == 0 {
			i += 8
			continue
		}
		Q, B := gather(q), gather(b)
		var esc uint64 // bytes a backslash escapes
		esc, carry = escaped(B, carry, 8)
		upto := uint64(0xFF)
		if end := Q &^ esc; end != 0 {
			upto = end&-end - 1
		}
		if ctl != 0 && gather(ctl)&upto != 0 {
			return -1
		}
		if other := esc &^ (Q | B) & upto; other != 0 && !otherEscapes(s, i, other) {
			return -1
		}
		if upto != 0xFF {
			return i + bits.TrailingZeros64(upto+1) + 1
		}
		i += 8
	}
	// The last bytes of s, one at a time.
	for ; i < len(s); i++ {
		c := s[i]
		if carry != 0 {
			carry = 0
			if !escapeAt(s, i) {
				return -1
			}
			continue
		}
		switch {
		case c == '"':
			return i + 1
		case c == '\\':
			carry = 1
		case c < ' ':
			return -1
		}
	}
	return -1
}

// escaped marks the bytes of a block of width bytes that a backslash
// escapes, from its backslashes B (bit k for byte k) and the carry of the
// bytes before it (1 when they ended in an odd backslash run), and returns
// the carry into the next block. simdjson's method: a run of backslashes
// escapes the byte after it when the run's length is odd, which one
// subtraction tells for every run at once — a run starting on an even bit
// borrows through to the byte after it, one starting on an odd bit does
// not — once the odd bits are flipped in.
func escaped(B, carry uint64, width uint) (esc, next uint64) {
	mask := ^uint64(0) >> (64 - width)
	odd := 0xAAAAAAAAAAAAAAAA & mask
	starts := B &^ carry
	code := ((starts<<1 | odd) - starts) ^ odd
	return (code ^ (B | carry)) & mask, code & B >> (width - 1) & 1
}

// otherEscapes checks the escaped bytes marked in m (bit k for s[i+k])
// that are neither a quote nor a backslash.
func otherEscapes(s string, i int, m uint64) bool {
	for ; m != 0; m &= m - 1 {
		if !escapeAt(s, i+bits.TrailingZeros64(m)) {
			return false
		}
	}
	return true
}

// escapeAt checks the escape whose letter is s[j] (after its backslash).
func escapeAt(s string, j int) bool {
	switch escapes[s[j]] {
	case 1:
		return true
	case 5:
		return len(s)-j >= 5 && isHex(s[j+1]) && isHex(s[j+2]) && isHex(s[j+3]) && isHex(s[j+4])
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validNumber returns the end of the number at s[i], or -1.
func validNumber(s string, i int) int {
	if s[i] == '-' {
		i++
	}
	if i >= len(s) || s[i] < '0' || s[i] > '9' {
		return -1
	}
	if s[i] == '0' {
		i++
	} else {
		i = digits(s, i)
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return -1
		}
		i = digits(s, i)
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return -1
		}
		i = digits(s, i)
	}
	return i
}

func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// load64 reads s[i:i+8] as a little-endian word (the compiler makes it
// one load).
func load64(s string, i int) uint64 { return wordAt(s, i) }

// special is non-zero when x holds a quote, a backslash or a control
// byte; cheaper than the exact masks, it only says whether to look.
func special(x uint64) uint64 {
	q, b := x^lsb*'"', x^lsb*'\\'
	return ((q-lsb)&^q | (b-lsb)&^b | (x-lsb*' ')&^x) & msb
}

// eqMask marks (high bit of the byte) exactly the bytes of x equal to c.
func eqMask(x uint64, c byte) uint64 {
	t := x ^ lsb*uint64(c)
	return ^((t&^msb + (msb - lsb)) | t) & msb
}

// gather packs the high bits of the eight bytes of m (nothing else set)
// into the low byte: bit k for byte k.
func gather(m uint64) uint64 { return m * 0x0002040810204081 >> 56 }
