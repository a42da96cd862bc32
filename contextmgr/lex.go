package contextmgr

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"

	"github.com/haltline/haltline/wire/jsonscan"
)

// Byte-level primitives of the package's JSON reading. Strings are found
// and checked by jsonscan, the scanner the provider codecs use, and
// decoded by its AppendUnescaped; what is the package's own is their
// weighing.

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
)

// lexString reads the JSON string whose opening quote is at b[i] (text is
// b as a string): jsonscan.ValidString finds its end and checks it. It
// returns the index after the closing quote, the weight of its contents
// (what weighString returns), whether they hold escapes, and false when the
// string is not valid JSON (a control character, a bad escape, no closing
// quote).
func lexString(b []byte, text string, i int) (end int, w uint64, esc, ok bool) {
	end = jsonscan.ValidString(text, i)
	if end < 0 {
		return i, 0, false, false
	}
	body := b[i+1 : end-1]
	return end, uint64(weigh(body)), bytes.IndexByte(body, '\\') >= 0, true
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
