package contextmgr

import (
	"unicode/utf8"
	"unsafe"

	"github.com/haltline/haltline/wire/jsonscan"
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
func appendMarshal(dst []byte, src []byte) []byte { return jsonscan.AppendEscaped(dst, src, true) }

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
