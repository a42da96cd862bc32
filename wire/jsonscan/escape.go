package jsonscan

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// AppendEscaped appends src as the inside of a JSON string literal (no
// quotes), as encoding/json writes it: invalid UTF-8 becomes U+FFFD,
// U+2028 and U+2029 are escaped, and with html so are <, > and &, which
// makes the bytes those of json.Marshal (where callers need byte-stable
// output, e.g. a prompt prefix that caches must keep).
func AppendEscaped[T ~string | ~[]byte](dst []byte, src T, html bool) []byte {
	const hex = "0123456789abcdef"
	dst = slices.Grow(dst, len(src)+len(src)/8+2)
	start := 0
	for i := 0; i < len(src); {
		// Ids, names and prose need nothing escaped: eight bytes at a
		// time while none is a quote, a backslash, a control byte,
		// non-ASCII or (with html) one of <, > and &.
		if i+8 <= len(src) {
			x := wordAt(src, i)
			m := special(x) | x&msb
			if html {
				m |= eqMask(x, '<') | eqMask(x, '>') | eqMask(x, '&')
			}
			if m == 0 {
				i += 8
				continue
			}
			// The lowest mark is exact (a borrow only runs upward): the
			// bytes below it need nothing.
			i += bits.TrailingZeros64(m) >> 3
		}
		if b := src[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && (!html || (b != '<' && b != '>' && b != '&')) {
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
		c, size := decodeRune(src[i:])
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
	return append(dst, src[start:]...)
}

// wordAt reads s[i:i+8], of a string or a byte slice, as a little-endian
// word (the compiler makes it one load).
func wordAt[T ~string | ~[]byte](s T, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func decodeRune[T ~string | ~[]byte](s T) (rune, int) {
	switch v := any(s).(type) {
	case string:
		return utf8.DecodeRuneInString(v)
	case []byte:
		return utf8.DecodeRune(v)
	}
	return utf8.DecodeRuneInString(string(s))
}

// AppendFloat appends f as encoding/json writes it: the shortest form, in
// decimal notation from 1e-6 to below 1e21, in exponent notation outside,
// where a one-digit negative exponent is not padded (e-9, not e-09). NaN
// and the infinities, which encoding/json refuses, are written as strconv
// writes them.
func AppendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
