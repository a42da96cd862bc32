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
