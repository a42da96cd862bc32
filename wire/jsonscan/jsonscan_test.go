package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestSkipString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		in   string
		want int
	}{
		{"plain", `"abc",`, 5},
		{"escaped quote", `"a\"b",`, 6},
		{"escaped backslash before quote", `"a\\",`, 5},
		{"three backslashes", `"a\\\"b",`, 8},
		{"unterminated", `"abc`, -1},
		{"empty", `"",`, 2},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := SkipString(tc.in, 0); got != tc.want {
				t.Fatalf("SkipString(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzSkipString(f *testing.F) {
	f.Add("hello")
	f.Add(`a"b\c`)
	f.Fuzz(func(t *testing.T, s string) {
		enc, _ := json.Marshal(s)
		lit := string(enc) + ",rest"
		if got := SkipString(lit, 0); got != len(enc) {
			t.Fatalf("SkipString(%q) = %d, want %d", lit, got, len(enc))
		}
	})
}

// AppendUnescaped decodes as gjson does, on valid and odd escapes alike.
func FuzzAppendUnescaped(f *testing.F) {
	for _, s := range []string{`plain`, `a\"b\\c\/d\n\t`, `\u00e9\ud83d\ude00`, `\ud83d x`, `\uZZZZ`, `bad \q end`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, body := range []string{string(mustJSON(s))[1 : len(mustJSON(s))-1], s} {
			if strings.ContainsRune(body, '"') && !strings.Contains(body, `\"`) {
				continue // gjson would end the string at the quote
			}
			lit := `"` + body + `"`
			if !gjson.Valid(lit) {
				continue
			}
			want := gjson.Parse(lit).Str
			if got := string(AppendUnescaped(nil, body)); got != want {
				t.Fatalf("AppendUnescaped(%q) = %q, gjson %q", body, got, want)
			}
			// Into a buffer the caller sized to the body, after what it holds.
			if got := AppendUnescaped(append(make([]byte, 0, 3+len(body)), "pre"...), body); string(got) != "pre"+want {
				t.Fatalf("AppendUnescaped(pre, %q) = %q, want pre%q", body, got, want)
			}
		}
	})
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// A buffer sized to the body is room enough: decoding never lengthens.
func TestAppendUnescapedInPlace(t *testing.T) {
	body := strings.Repeat(`a tool's \"output\"\n\tcaf\u00e9 `, 40)
	buf := make([]byte, 0, len(body))
	out := AppendUnescaped(buf, body)
	if &out[:1][0] != &buf[:1][0] {
		t.Fatal("decoded into a new buffer, not the one of the body's size")
	}
	if want := gjson.Parse(`"` + body + `"`).Str; string(out) != want {
		t.Fatalf("decoded %q, want %q", out, want)
	}
}
