package contextmgr

import "github.com/haltline/haltline/wire/jsonscan"

// reader reads a request body once and does three things on the way:
// it validates it (the grammar gjson.ValidBytes accepts: RFC 8259, bytes
// not checked for UTF-8), it weighs it exactly as scan does, and it lets
// the caller read the members and elements it cares about. A Rewrite needs
// all three, and on a large body each would cost as much as the others as
// a pass of its own.
//
// Weights are kept running, in body order, because scan's weights depend on
// the last member name seen (ids, blobs): the weight of a value read through
// the reader is r.w after minus r.w before.
type reader struct {
	b       []byte
	text    string // b, read as a string by jsonscan (never copied)
	cheap   bool   // OpenAI: id values cost idWeight (see scan)
	w       int64
	tools   bool
	lastKey []byte
	bad     bool
}

func (r *reader) fail() int {
	r.bad = true
	return len(r.b)
}

// key reads the member name at b[i] and its colon; it returns the raw name,
// whether it holds escapes, and the index of the value (white space
// skipped).
func (r *reader) key(i int) (k []byte, esc bool, v int) {
	b := r.b
	if i >= len(b) || b[i] != '"' {
		return nil, false, r.fail()
	}
	e, _, esc, ok := lexString(b, r.text, i)
	if !ok {
		return nil, false, r.fail()
	}
	k = b[i+1 : e-1]
	j := skipWS(b, e)
	if j >= len(b) || b[j] != ':' {
		return nil, false, r.fail()
	}
	r.w += keyWeight
	r.lastKey = k
	v = skipWS(b, j+1)
	if len(k) == 5 && string(k) == "tools" && v < len(b) && b[v] == '[' {
		n := skipWS(b, v+1)
		r.tools = r.tools || (n < len(b) && b[n] != ']')
	}
	return k, esc, v
}

// str reads the string value at b[i].
func (r *reader) str(i int) int {
	e, sw, _, ok := lexString(r.b, r.text, i)
	if !ok {
		return r.fail()
	}
	if r.cheap && isIDKey(r.lastKey) {
		r.w += idWeight
		return e
	}
	w := int64(sw)
	if n := e - i - 2; n >= 256 && isBlobKey(r.lastKey) {
		w = min(w, min(int64(n/blobRatio), blobCap)*weightScale)
	}
	r.w += w + valueWeight
	return e
}

// scalar reads the number or literal at b[i].
func (r *reader) scalar(i int) int {
	b := r.b
	e := jsonscan.ValidValue(r.text, i)
	if e < 0 {
		return r.fail()
	}
	for _, c := range b[i:e] {
		r.w += int64(outerWeight[c])
	}
	return e
}

// value reads the value at b[i] (no leading white space) and returns its
// end. Containers are read iteratively, their kinds on a stack of bytes: a
// deeply nested body costs no call stack.
func (r *reader) value(i int) int {
	b := r.b
	var buf [32]byte
	stack := buf[:0]
	for {
		if i >= len(b) {
			return r.fail()
		}
		switch b[i] {
		case '{':
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			stack = append(stack, '{')
			if _, _, i = r.key(i); r.bad {
				return i
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
			if i = r.str(i); r.bad {
				return i
			}
		default:
			if i = r.scalar(i); r.bad {
				return i
			}
		}
		// After a value: close containers, or go on to the next value.
		for {
			if len(stack) == 0 {
				return i
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return r.fail()
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i = skipWS(b, i+1)
				if top == '{' {
					if _, _, i = r.key(i); r.bad {
						return i
					}
				}
				break
			}
			if top == '{' && b[i] == '}' || top == '[' && b[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return r.fail()
		}
	}
}

// object reads the object whose brace is at b[i], calling f with each
// member's raw name, whether the name holds escapes, and the start of its
// value; f reads the value through the reader and returns its end. object
// returns the end of the object.
func (r *reader) object(i int, f func(k []byte, esc bool, v int) int) int {
	b := r.b
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		k, esc, v := r.key(i)
		if r.bad {
			return v
		}
		if v >= len(b) {
			return r.fail()
		}
		if i = f(k, esc, v); r.bad {
			return i
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return r.fail()
		}
		switch b[i] {
		case '}':
			return i + 1
		case ',':
			i = skipWS(b, i+1)
		default:
			return r.fail()
		}
	}
}

// array reads the array whose bracket is at b[i], calling f with the start
// of each element; f returns the element's end.
func (r *reader) array(i int, f func(v int) int) int {
	b := r.b
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(b) {
			return r.fail()
		}
		if i = f(i); r.bad {
			return i
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return r.fail()
		}
		switch b[i] {
		case ']':
			return i + 1
		case ',':
			i = skipWS(b, i+1)
		default:
			return r.fail()
		}
	}
}

// member reads a member's value and returns its span, weighed.
func (r *reader) member(v int) span {
	w0 := r.w
	e := r.value(v)
	return span{s: v, e: e, w: r.w - w0}
}
