package jsonscan

// Object walks the object whose '{' is at s[i]. For each member, fn gets
// the raw key (between its quotes, escapes left as they are), the index of
// the key's opening quote and the index of the value, and returns the
// index past the value, or -1 to end the walk as malformed; fn decides how
// much of the value it reads. Object returns the index past the object, or
// -1. Keys are validated when valid is set, else only delimited; the
// separators are always checked, so a walk that succeeds has found the
// whole object.
func Object(s string, i int, valid bool, fn func(key string, start, v int) int) int {
	if i >= len(s) || s[i] != '{' {
		return -1
	}
	i = SkipWS(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1
	}
	return Members(s, i, valid, fn)
}

// Members walks an object's members from the key whose opening quote is at
// s[i] to the object's end, as Object does from its '{': a reader that
// knows the members before i (an event repeating the last one's first
// bytes) starts there.
func Members(s string, i int, valid bool, fn func(key string, start, v int) int) int {
	for {
		if i >= len(s) || s[i] != '"' {
			return -1
		}
		var k int
		if valid {
			k = ValidString(s, i)
		} else {
			k = SkipString(s, i)
		}
		if k < 0 {
			return -1
		}
		start := i
		i = SkipWS(s, k)
		if i >= len(s) || s[i] != ':' {
			return -1
		}
		v := SkipWS(s, i+1)
		if v >= len(s) {
			return -1
		}
		end := fn(s[start+1:k-1], start, v)
		if end < 0 {
			return -1
		}
		i = SkipWS(s, end)
		if i >= len(s) {
			return -1
		}
		switch s[i] {
		case '}':
			return i + 1
		case ',':
			i = SkipWS(s, i+1)
		default:
			return -1
		}
	}
}

// Array walks the array whose '[' is at s[i]: fn gets the index of each
// element (always inside s) and returns the index past it, or -1 to end the walk as
// malformed. Array returns the index past the array, or -1.
func Array(s string, i int, fn func(v int) int) int {
	if i >= len(s) || s[i] != '[' {
		return -1
	}
	i = SkipWS(s, i+1)
	if i < len(s) && s[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(s) {
			return -1
		}
		end := fn(i)
		if end < 0 {
			return -1
		}
		i = SkipWS(s, end)
		if i >= len(s) {
			return -1
		}
		switch s[i] {
		case ']':
			return i + 1
		case ',':
			i = SkipWS(s, i+1)
		default:
			return -1
		}
	}
}
