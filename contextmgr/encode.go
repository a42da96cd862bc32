package contextmgr

import (
	"slices"
	"unicode/utf8"
	"unsafe"
)

// JSON strings as sjson writes them: the forwarded bytes of a replaced
// result must be what sjson.SetBytes would have made, and their weight
// what scan would say, without scanning them again.

// appendStringify appends s as a JSON string, as sjson does (through
// json.Marshal when it must escape).
func appendStringify(buf []byte, s string) []byte {
	buf = append(buf, '"')
	if mustMarshal(s) {
		buf = appendMarshal(buf, strBytes(s))
	} else {
		buf = append(buf, s...)
	}
	return append(buf, '"')
}

// mustMarshal reports whether sjson marshals s rather than quoting it.
func mustMarshal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > 0x7f || s[i] == '"' || s[i] == '\\' {
			return true
		}
	}
	return false
}

// strBytes views s as bytes, to be read only.
func strBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// appendMarshal appends what json.Marshal(string(src)) writes between its
// quotes.
func appendMarshal(dst []byte, src []byte) []byte {
	const hex = "0123456789abcdef"
	dst = slices.Grow(dst, len(src)+len(src)/8+2)
	start := 0
	for i := 0; i < len(src); {
		if b := src[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
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
		c, size := utf8.DecodeRune(src[i:])
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

// marshalWeight returns weigh(appendMarshal(nil, src)) without writing.
func marshalWeight(src []byte) int64 {
	var s int64
	for i := 0; i < len(src); {
		if c := src[i]; c < utf8.RuneSelf {
			s += marshalW[c]
			i++
			continue
		}
		c, size := utf8.DecodeRune(src[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			s += weigh([]byte(`\ufffd`))
		case c == '\u2028':
			s += weigh([]byte(`\u2028`))
		case c == '\u2029':
			s += weigh([]byte(`\u2029`))
		default:
			s += weigh(src[i : i+size])
		}
		i += size
	}
	return s
}

// marshalW is the weight of each ASCII byte as appendMarshal writes it.
var marshalW = func() (w [utf8.RuneSelf]int64) {
	for c := range w {
		w[c] = weigh(appendMarshal(nil, []byte{byte(c)}))
	}
	return w
}()
