package contextmgr

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A minimal single-pass reader over JSON the body validation already
// accepted: it locates values without decoding them, so that only the
// strings that are used are ever unescaped.

// span is a value's bytes [s, e) in the buffer it was read from.
type span struct {
	s, e int
}

func (v span) ok() bool { return v.e > v.s }

// stringEnd returns the index after the closing quote of the string whose
// opening quote is at b[i], and whether it holds escapes.
func stringEnd(b []byte, i int) (end int, esc bool) {
	i++
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		m := byteMask(x, '"') | byteMask(x, '\\')
		if m == 0 {
			i += 8
			continue
		}
		i += bits.TrailingZeros64(m) / 8
		if b[i] == '"' {
			return i + 1, esc
		}
		esc = true
		i += 2
	}
	for i < len(b) {
		switch b[i] {
		case '"':
			return i + 1, esc
		case '\\':
			esc = true
			i += 2
			continue
		}
		i++
	}
	return len(b), esc
}

// valueEnd returns the index after the value starting at b[i] (no leading
// white space).
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		e, _ := stringEnd(b, i)
		return e
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i, _ = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\n', '\r', '\t':
				return i
			}
			i++
		}
		return i
	}
}

// eachMember calls f for each member of the object whose opening brace is
// at b[i], with its raw key (quotes excluded) and the start of its value; f
// returns the end of the value (valueEnd, or further parsing of its own).
// eachMember returns the end of the object; ok is false when a key holds an
// escape (the caller then takes the slow path).
func eachMember(b []byte, i int, f func(key []byte, val int) int) (end int, ok bool) {
	i = skipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		ke, esc := stringEnd(b, i)
		if esc {
			return 0, false
		}
		key := b[i+1 : ke-1]
		i = skipWS(b, ke)
		i = skipWS(b, i+1) // the colon
		i = skipWS(b, f(key, i))
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return i + 1, true
}

// eachElement calls f for each element of the array whose opening bracket
// is at b[i]; f returns the element's end. It returns the array's end.
func eachElement(b []byte, i int, f func(val int) int) int {
	i = skipWS(b, i+1)
	for i < len(b) && b[i] != ']' {
		i = skipWS(b, f(i))
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return i + 1
}

// appendUnescaped appends the decoded contents of a JSON string (s is
// between the quotes), exactly as gjson decodes it.
func appendUnescaped(dst, s []byte) []byte {
	// Decoding never lengthens: write in place into room for s.
	n := len(dst)
	dst = slices.Grow(dst, len(s))[:n+len(s)]
	out := dst[n:]
	j := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= ' ' && c != '\\' {
			out[j] = c
			i++
			j++
			continue
		}
		if c < ' ' {
			break
		}
		i++
		if i >= len(s) {
			break
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
	return dst[:n+j]
}

func hex4(s []byte) rune {
	n, _ := strconv.ParseUint(string(s[:4]), 16, 64)
	return rune(n)
}
