package jsonscan

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestValid(t *testing.T) {
	t.Parallel()
	long := strings.Repeat(`{\"k\": \"v\\\\\"}\n\t`, 20)
	tests := []struct {
		desc string
		in   string
		want bool
	}{
		{"object", `{"a":[1,-2.5e+3,true,false,null,"x"],"b":{}}`, true},
		{"white space around", " \n\t{ \"a\" : [ ] }\r\n", true},
		{"bare value", `"just a string"`, true},
		{"trailing comma", `{"a":1,}`, false},
		{"leading zero", `[01]`, false},
		{"bad literal", `[tru]`, false},
		{"two values", `{} {}`, false},
		{"control byte in string", "[\"a\x01b\"]", false},
		{"tab in string", "[\"a\tb\"]", false},
		{"bad escape", `["a\qb"]`, false},
		{"short unicode escape", `["\u12"]`, false},
		{"unicode escape", `["\u00e9\uD83D\uDE00"]`, true},
		{"unterminated", `["abc`, false},
		{"long escaped string", `["` + long + `"]`, true},
		{"long string, bad escape at the end", `["` + long + `\x"]`, false},
		{"long string, control late", `["` + long + "\x1f" + `"]`, false},
		{"long string, control after it", `["` + long + `"` + "\x1f]", false},
		{"deep", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), true},
		{"unbalanced", strings.Repeat("[", 100) + strings.Repeat("]", 99), false},
		{"mismatched", `[}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := Valid(tc.in); got != tc.want {
				t.Fatalf("Valid(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if got := gjson.Valid(tc.in); got != tc.want {
				t.Fatalf("gjson.Valid(%q) = %v: the test is wrong", tc.in, got)
			}
		})
	}
}

// Containers nested past MaxDepth are refused, where gjson would accept
// them, in one pass however deep the body goes.
func TestValidRefusesDeepNesting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc string
		in   string
	}{
		{"arrays", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)},
		{"objects", strings.Repeat(`{"a":`, MaxDepth) + "{}" + strings.Repeat("}", MaxDepth)},
		{"a hundred thousand levels", strings.Repeat(`[{"a":`, 50_000) + "1" + strings.Repeat("}]", 50_000)},
		{"unterminated", strings.Repeat("[", 100_000)},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if Valid(tc.in) {
				t.Fatal("Valid accepted nesting past MaxDepth")
			}
			if SkipValue(tc.in, 0) != -1 {
				t.Fatal("SkipValue found a value nested past MaxDepth")
			}
			if !TooDeep(tc.in) {
				t.Fatal("TooDeep missed it")
			}
		})
	}
	ok := strings.Repeat(`{"a":`, MaxDepth) + `"[[[[{{{{"` + strings.Repeat("}", MaxDepth)
	if !Valid(ok) || SkipValue(ok, 0) != len(ok) || TooDeep(ok) {
		t.Fatal("a value at MaxDepth (brackets inside a string do not count) was refused")
	}
}

// Valid accepts exactly what gjson.Valid accepts (within MaxDepth), and ValidString ends a
// string where SkipString does.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a\"b\\\\c\n"}]}`,
		`[1,2.5e-3,-0,true,false,null,"\u00e9"]`,
		`"` + strings.Repeat(`\\\"ab\n`, 9) + `"`,
		`{"a":"\q"}`, "[\"\x01\"]", `{"a":1,}`, `[`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Valid(s), gjson.Valid(s) && !TooDeep(s); got != want {
			t.Fatalf("Valid(%q) = %v, gjson %v", s, got, want)
		}
		// Every quote starts a candidate string.
		for i := 0; i < len(s); i++ {
			if s[i] != '"' {
				continue
			}
			end := ValidString(s, i)
			if end < 0 {
				continue
			}
			if skip := SkipString(s, i); skip != end {
				t.Fatalf("ValidString(%q, %d) = %d, SkipString %d", s, i, end, skip)
			}
			if !gjson.Valid(s[i:end]) {
				t.Fatalf("ValidString(%q, %d) accepted %q", s, i, s[i:end])
			}
		}
	})
}

// Strings made by encoding/json, any length and content, end where they
// should, seen from any alignment.
func FuzzValidStringEncoded(f *testing.F) {
	f.Add("plain", 0)
	f.Add(`{"a":"b\"c"}`+"\n\t\x01", 3)
	f.Add(strings.Repeat(`\"`, 20), 7)
	f.Fuzz(func(t *testing.T, s string, pad int) {
		enc, _ := json.Marshal(s)
		prefix := strings.Repeat(" ", pad&15)
		lit := prefix + string(enc) + `,"rest\"`
		i := len(prefix)
		if got, want := ValidString(lit, i), i+len(enc); got != want {
			t.Fatalf("ValidString(%q) = %d, want %d", lit, got, want)
		}
		if got, want := SkipString(lit, i), i+len(enc); got != want {
			t.Fatalf("SkipString(%q) = %d, want %d", lit, got, want)
		}
	})
}

func TestObjectArray(t *testing.T) {
	t.Parallel()
	s := `{"a": [1, {"b":2}] , "c\"d":"x" }tail`
	var keys []string
	end := Object(s, 0, true, func(key string, start, v int) int {
		keys = append(keys, key+"@"+s[start:start+1])
		if key == "a" {
			n := 0
			e := Array(s, v, func(v int) int {
				n++
				return ValidValue(s, v)
			})
			if n != 2 {
				t.Errorf("%d elements", n)
			}
			return e
		}
		return ValidValue(s, v)
	})
	if end != len(s)-4 || strings.Join(keys, ",") != `a@",c\"d@"` {
		t.Fatalf("end %d keys %q", end, keys)
	}
	for _, bad := range []string{`{"a":1,}`, `{"a" 1}`, `{"a":1 "b":2}`, `{,}`, `{"a":1`, `[1,]`} {
		fn := func(key string, start, v int) int { return ValidValue(bad, v) }
		if bad[0] == '[' {
			if Array(bad, 0, func(v int) int { return ValidValue(bad, v) }) >= 0 {
				t.Errorf("Array accepted %q", bad)
			}
		} else if Object(bad, 0, true, fn) >= 0 {
			t.Errorf("Object accepted %q", bad)
		}
	}
}

// refString is gjson's validstring: one byte at a time.
func refString(s string, i int) int {
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ':
			return -1
		case c == '"':
			return i + 1
		case c == '\\':
			i++
			if i >= len(s) {
				return -1
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for range 4 {
					if i++; i >= len(s) || !isHex(s[i]) {
						return -1
					}
				}
			default:
				return -1
			}
		}
	}
	return -1
}

// Strings mixing long plain runs with runs of dense escapes switch
// ValidString between its two ways of reading, anywhere in a word.
func TestValidStringMixed(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{`\"`, `\\`, `\n`, `\/`, `\u00e9`, `\\\"`, `"`, `\q`, "\x01", `\u12`, `\`}
	for n := range 20000 {
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(40) {
			if rng.IntN(3) == 0 {
				b.WriteString(strings.Repeat("abcdefghij", 8)[:rng.IntN(80)])
				continue
			}
			p := pieces[rng.IntN(4)]
			if rng.IntN(60) == 0 {
				p = pieces[4+rng.IntN(len(pieces)-4)]
			}
			b.WriteString(p)
		}
		if rng.IntN(8) != 0 { // else unterminated
			b.WriteString(`", "tail"`)
		}
		s := b.String()
		if got, want := ValidString(s, 0), refString(s, 0); got != want {
			t.Fatalf("case %d: ValidString(%q) = %d, want %d", n, s, got, want)
		}
		if want := refString(s, 0); want > 0 {
			if got := SkipString(s, 0); got != want {
				t.Fatalf("case %d: SkipString(%q) = %d, want %d", n, s, got, want)
			}
		}
	}
}

// AppendEscaped writes what encoding/json writes, with and without HTML
// escaping, for strings and byte slices alike.
func FuzzAppendEscaped(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c\n\t\r\b\f\x01", "<a&b>", "\u2028\u2029", "\xff\xfe", "héllo 世界"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, html := range []bool{true, false} {
			buf.Reset()
			enc.SetEscapeHTML(html)
			if err := enc.Encode(s); err != nil {
				t.Fatal(err)
			}
			want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
			want = want[1 : len(want)-1]
			if got := AppendEscaped(nil, s, html); !bytes.Equal(got, want) {
				t.Fatalf("html=%v string: %q, want %q", html, got, want)
			}
			if got := AppendEscaped(nil, []byte(s), html); !bytes.Equal(got, want) {
				t.Fatalf("html=%v bytes: %q, want %q", html, got, want)
			}
		}
	})
}

// hasControl finds one control byte at any position of strings of every
// length around its 32- and 8-byte steps, and none where there is none
// (0x20, 0x7f and bytes >= 0x80 are not control bytes).
func TestHasControl(t *testing.T) {
	plain := []byte(strings.Repeat("a \x7f\x80\xff~ Z", 40))
	for n := 0; n <= 300; n++ {
		s := plain[:n]
		if hasControl(string(s)) {
			t.Fatalf("control found in %q", s)
		}
		for i := range n {
			b := append([]byte(nil), s...)
			b[i] = byte(i % 0x20)
			if !hasControl(string(b)) {
				t.Fatalf("control byte %#x at %d of %d not found", b[i], i, n)
			}
		}
	}
}
