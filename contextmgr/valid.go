package contextmgr

import (
	"encoding/binary"
	"math/bits"
)

// validJSON reports whether b is one JSON value with optional white space
// around it: the grammar gjson.ValidBytes accepts (RFC 8259; bytes are not
// checked for UTF-8), read iteratively, with strings tested eight bytes at
// a time.
func validJSON(b []byte) bool {
	var stackBuf [64]byte
	stack := stackBuf[:0] // '{' or '[' per open container
	i := skipWS(b, 0)
	for {
		// A value at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{':
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			stack = append(stack, '{')
			var ok bool
			if i, ok = validKey(b, i); !ok {
				return false
			}
			continue
		case '[':
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == ']' {
				i++
				break
			}
			stack = append(stack, '[')
			continue
		case '"':
			var ok bool
			if i, ok = validString(b, i+1); !ok {
				return false
			}
		case 't':
			if len(b)-i < 4 || string(b[i:i+4]) != "true" {
				return false
			}
			i += 4
		case 'f':
			if len(b)-i < 5 || string(b[i:i+5]) != "false" {
				return false
			}
			i += 5
		case 'n':
			if len(b)-i < 4 || string(b[i:i+4]) != "null" {
				return false
			}
			i += 4
		default:
			if c != '-' && (c < '0' || c > '9') {
				return false
			}
			var ok bool
			if i, ok = validNumber(b, i); !ok {
				return false
			}
		}
		// After a value: close containers, or go on to the next value.
		for {
			i = skipWS(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i = skipWS(b, i+1)
				if top == '{' {
					var ok bool
					if i, ok = validKey(b, i); !ok {
						return false
					}
				}
				break
			}
			if top == '{' && b[i] == '}' || top == '[' && b[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return false
		}
	}
}

// validKey reads a member name and its colon at b[i]; it returns the index
// of the value (white space skipped).
func validKey(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := validString(b, i+1)
	if !ok {
		return i, false
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipWS(b, i+1), true
}

// validString reads a string's contents from b[i]; it returns the index
// after the closing quote.
func validString(b []byte, i int) (int, bool) {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	for {
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			m := byteMask(x, '"') | byteMask(x, '\\') | ((x - lo*0x20) &^ x & hi)
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) / 8
			break
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < ' ':
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 || !ishex(b[i+1]) || !ishex(b[i+2]) || !ishex(b[i+3]) || !ishex(b[i+4]) {
					return i, false
				}
				i += 5
			default:
				return i, false
			}
		default:
			i++
		}
	}
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validNumber reads a number at b[i] ('-' or a digit); it returns its end.
func validNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
	}
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, true
}
