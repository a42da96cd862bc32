package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// AppendUnescaped appends the JSON string body s (between the quotes)
// decoded exactly as gjson decodes it — a control byte or a bad escape ends
// the text, a lone surrogate becomes U+FFFD, invalid hex reads as 0 — so
// text decoded here and text read through gjson hash the same. On a body
// ValidString accepted every reading agrees, so it is the one decoder of
// the gateway's readers. It appends into a reused buffer instead of
// allocating a string per value.
//
// Eight bytes at a time: agent traffic is mostly long strings, and tool
// output embedded as a JSON string carries an escape every few bytes (\"
// and \n of logs and JSON), so the one-letter escapes are decoded a word
// at a time rather than by leaving the word loop for each.
func AppendUnescaped[T ~string | ~[]byte](dst []byte, s T) []byte {
	// Decoding never lengthens: write in place into the room for s. The
	// word loop's whole-word stores reach up to a word past the word read,
	// so it runs where the room allows that (a buffer grown here has a
	// word of slack; one sized by the caller to s exactly ends a word
	// early, without growing).
	n := len(dst)
	if cap(dst)-n < len(s) {
		dst = slices.Grow(dst, len(s)+8)
	}
	out := dst[n:cap(dst)]
	i, j := 0, 0
	for {
		for i+8 <= len(s) && i+16 <= len(out) {
			x := wordAt(s, i)
			// Loose marks (one may be spurious above a true one): enough
			// to tell a word with nothing to decode.
			b := x ^ lsb*'\\'
			mb, mc := (b-lsb)&^b&msb, (x-lsb*' ')&^x&msb
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
			bs := gather(eqMask(x, '\\'))
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
				p := bits.TrailingZeros64(m)
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
		if c < ' ' || i+1 >= len(s) {
			return dst[:n+j]
		}
		i++
		if e := unescapeByte[s[i]]; e != 0 {
			out[j] = e
			i++
			j++
			continue
		}
		if s[i] != 'u' || i+5 > len(s) {
			return dst[:n+j]
		}
		r := hex4(s[i+1 : i+5])
		i += 5
		if r >= 0xD800 && r < 0xDC00 && len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
			if r2 := hex4(s[i+2 : i+6]); r2 >= 0xDC00 && r2 < 0xE000 {
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
		}
		j += utf8.EncodeRune(out[j:], r)
	}
}

// Unescape returns the JSON string body s decoded as AppendUnescaped
// decodes it, in one allocation: the string is made over the bytes
// decoded, which nothing else holds.
func Unescape[T ~string | ~[]byte](s T) string {
	d := AppendUnescaped(nil, s)
	if len(d) == 0 {
		return ""
	}
	return unsafe.String(&d[0], len(d))
}

// unescapeByte maps the letter of a one-letter escape to what it stands
// for; 0 for the others.
var unescapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// hex4 reads four hex digits; anything else reads as 0, as gjson reads it.
func hex4[T ~string | ~[]byte](s T) rune {
	var r rune
	for k := range 4 {
		c := s[k]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0
		}
		r = r<<4 | rune(c)
	}
	return r
}
