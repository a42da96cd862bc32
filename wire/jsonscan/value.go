package jsonscan

import (
	"strconv"
	"strings"
)

// Value is a JSON value located by the scanner, for readers that look a
// few members up in text already validated: Raw is its bytes ("" when
// there is none), At their offset in the text the reading started from.
// Its answers are gjson's for the same reads (the first of duplicate
// members, names compared decoded, String's spelling of numbers), so a
// reader moved onto it reads a request as before.
type Value struct {
	Raw string
	At  int
}

// Parse locates the value s holds, white space around it left out.
func Parse(s string) Value {
	i := SkipWS(s, 0)
	e := SkipValue(s, i)
	if e < 0 {
		return Value{}
	}
	return Value{Raw: s[i:e], At: i}
}

// Exists reports whether there is a value (null is one).
func (v Value) Exists() bool { return v.Raw != "" }

// IsString, IsArray and IsObject report the value's kind.
func (v Value) IsString() bool { return v.Raw != "" && v.Raw[0] == '"' }
func (v Value) IsArray() bool  { return v.Raw != "" && v.Raw[0] == '[' }
func (v Value) IsObject() bool { return v.Raw != "" && v.Raw[0] == '{' }

// Get returns the member the dot-separated names of path lead to, through
// nested objects; none where a name is missing or a value is not an
// object. Of members of the same name the first counts.
func (v Value) Get(path string) Value {
	for {
		name, rest, more := strings.Cut(path, ".")
		v = v.member(name)
		if !more || !v.Exists() {
			return v
		}
		path = rest
	}
}

func (v Value) member(name string) Value {
	var found Value
	if !v.IsObject() {
		return found
	}
	var buf []byte
	Object(v.Raw, 0, false, func(key string, _, x int) int {
		e := SkipValue(v.Raw, x)
		if e < 0 || found.Exists() {
			return e
		}
		if strings.IndexByte(key, '\\') >= 0 {
			buf = AppendUnescaped(buf[:0], key)
			key = string(buf)
		}
		if key == name {
			found = Value{Raw: v.Raw[x:e], At: v.At + x}
		}
		return e
	})
	return found
}

// ForEach calls fn with each member of an object (its decoded name) or
// each element of an array (its index), until fn returns false; any other
// value it passes once, with no name, as gjson does.
func (v Value) ForEach(fn func(name string, i int, x Value) bool) {
	switch {
	case !v.Exists():
	case v.IsObject():
		k, stop := 0, false
		Object(v.Raw, 0, false, func(key string, _, x int) int {
			e := SkipValue(v.Raw, x)
			if e < 0 || stop {
				return e
			}
			if strings.IndexByte(key, '\\') >= 0 {
				key = Unescape(key)
			}
			stop = !fn(key, k, Value{Raw: v.Raw[x:e], At: v.At + x})
			k++
			return e
		})
	case v.IsArray():
		k, stop := 0, false
		Array(v.Raw, 0, func(x int) int {
			e := SkipValue(v.Raw, x)
			if e < 0 || stop {
				return e
			}
			stop = !fn("", k, Value{Raw: v.Raw[x:e], At: v.At + x})
			k++
			return e
		})
	default:
		fn("", 0, v)
	}
}

// String returns a string's decoded text, an object's or an array's
// bytes, "true" or "false", "" for null and none, and a number as gjson
// spells it: as written when it is an integer, else as the shortest
// decimal of its float64.
func (v Value) String() string {
	if v.Raw == "" {
		return ""
	}
	switch v.Raw[0] {
	case '"':
		body := v.Raw[1 : len(v.Raw)-1]
		if strings.IndexByte(body, '\\') < 0 {
			return body
		}
		return Unescape(body)
	case '{', '[':
		return v.Raw
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return ""
	}
	i := 0
	if v.Raw[0] == '-' {
		i++
	}
	for ; i < len(v.Raw); i++ {
		if v.Raw[i] < '0' || v.Raw[i] > '9' {
			f, _ := strconv.ParseFloat(v.Raw, 64)
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	}
	return v.Raw
}
