// Package jsonscan is the gateway's one JSON scanner, shared by the
// provider codecs, loopguard's canonicaliser and contextmgr's readers:
// finding the end of a value without decoding it, validating in the same
// single pass, walking the members of an object or the elements of an
// array, looking members up in validated text (Value, which reads as
// gjson reads), decoding a string's body (AppendUnescaped, the one
// decoder), writing a string or a float as encoding/json writes them, and
// the bound on nesting depth (MaxDepth) they all keep. It owns no provider
// semantics. Everything else in the gateway that reads or writes JSON goes
// through encoding/json.
package jsonscan

import (
	"math/bits"
	"strings"
)

// SkipString returns the index after the string literal starting at s[i]
// (a quote), or -1. It jumps from quote to quote (strings.IndexByte is
// vectorised), so long tool outputs cost little; where escaped quotes come
// close together (JSON text inside a string) it reads sixteen bytes at a
// time instead, as one jump per quote would then cost more.
func SkipString(s string, i int) int {
	j := i + 1
	// Short strings: a word at a time to the first quote or backslash,
	// cheaper than strings.IndexByte's setup.
	for w := 0; w < shortWords && j+8 <= len(s); w++ {
		x := load64(s, j)
		m := eqMask(x, '"') | eqMask(x, '\\')
		if m == 0 {
			j += 8
			continue
		}
		j += bits.TrailingZeros64(m) >> 3
		if s[j] == '"' {
			return j + 1
		}
		break // an escape: the loop below counts the backslashes
	}
	hops := 0
	for j < len(s) {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		// The quote ends the string unless an odd run of backslashes
		// escapes it.
		n := 0
		for p := j - 1; p > i && s[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		// Quotes every 16 bytes or closer: about where reading
		// everything starts to cost less than stopping at each.
		if hops++; hops >= 4 && j-i < hops*16 {
			return skipDense(s, j+1)
		}
		j++
	}
	return -1
}

// skipDense returns the index after the quote that ends the string whose
// bytes go on at s[i] (not escaped), or -1. Escapes are found with the bit
// arithmetic of ValidString, without its checks.
func skipDense(s string, i int) int { return skipDenseWords(s, i, 0) }

// skipDenseWords is skipDense in machine words, from s[i] with the carry
// of the bytes before it.
func skipDenseWords(s string, i int, carry uint64) int {
	for i+16 <= len(s) {
		x, y := load64(s, i), load64(s, i+8)
		Q := gather(eqMask(x, '"')) | gather(eqMask(y, '"'))<<8
		B := gather(eqMask(x, '\\')) | gather(eqMask(y, '\\'))<<8
		if Q|B|carry == 0 {
			i += 16
			continue
		}
		var esc uint64
		esc, carry = escaped(B, carry, 16)
		if end := Q &^ esc; end != 0 {
			return i + bits.TrailingZeros64(end) + 1
		}
		i += 16
	}
	for ; i < len(s); i++ {
		switch {
		case carry != 0:
			carry = 0
		case s[i] == '"':
			return i + 1
		case s[i] == '\\':
			carry = 1
		}
	}
	return -1
}

// shortWords is how many eight-byte words SkipString and ValidString read
// one at a time before they search with strings.IndexByte.
const shortWords = 4

// IsWS reports JSON white space.
func IsWS(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// SkipWS returns the index of the first non-space byte at or after i.
func SkipWS(s string, i int) int {
	for i < len(s) && IsWS(s[i]) {
		i++
	}
	return i
}

// MaxDepth is how deeply containers may nest in a value read here. Real
// requests nest a few levels (a tool's JSON schema a dozen or so); a
// hostile body of a hundred thousand levels would reach readers after the
// gateway's own scan that recurse (gjson, the upstream's parser). Past it
// ValidValue and SkipValue find no value, and TooDeep tells why.
const MaxDepth = 128

// TooDeep reports whether containers nest deeper than MaxDepth anywhere in
// s, read as JSON text (brackets inside strings do not count). It is for
// the error path: a value the readers refused may have been too deep.
func TooDeep(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			j := SkipString(s, i)
			if j < 0 {
				return false
			}
			i = j - 1
		case '{', '[':
			if depth++; depth > MaxDepth {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// SkipValue returns the index past the JSON value starting at s[i], or -1
// when there is none or it nests deeper than MaxDepth. It does not
// validate: it finds the end of a value in a body already known to be
// JSON, never decoding it.
func SkipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return SkipString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				j := SkipString(s, i)
				if j < 0 {
					return -1
				}
				i = j - 1
			case '{', '[':
				if depth++; depth > MaxDepth {
					return -1
				}
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(s) && !IsWS(s[j]) && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ':' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
