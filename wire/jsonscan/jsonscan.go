// Package jsonscan holds the byte-level JSON helpers that the provider
// codecs share: finding the end of a value without decoding it. It owns no
// provider semantics.
package jsonscan

import "strings"

// SkipString returns the index after the string literal starting at s[i]
// (a quote), or -1. It jumps from quote to quote (strings.IndexByte is
// vectorised), so long tool outputs cost little.
func SkipString(s string, i int) int {
	for j := i + 1; j < len(s); {
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
		j++
	}
	return -1
}

// IsWS reports JSON white space.
func IsWS(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// SkipWS returns the index of the first non-space byte at or after i.
func SkipWS(s string, i int) int {
	for i < len(s) && IsWS(s[i]) {
		i++
	}
	return i
}

// SkipValue returns the index past the JSON value starting at s[i], or -1
// when there is none. It does not validate: it finds the end of a value in
// a body already known to be JSON, never decoding it.
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
				depth++
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
