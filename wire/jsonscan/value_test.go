package jsonscan

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// Value reads what gjson reads: the same members found by the same paths,
// the same String of each, the same members and elements walked.
func FuzzValueIsGjson(f *testing.F) {
	for _, s := range []string{
		`{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"q\":1}"}}]}`,
		`{"a":1,"a":2,"b":{"c":[1,2.50,-3e2,true,false,null]},"d\u0061":"x","e":"caf\u00e9 \ud83d\ude00"}`,
		`[ {"text":"a"} , "s" , 12 , {"text":7} ]`,
		`"just a string"`, `-0.000001`, `1e400`, `{"function":"str"}`, `{"n\"q":{"x":{}}}`,
	} {
		f.Add(s)
	}
	paths := []string{"role", "a", "b", "b.c", "da", "e", "id", "text", "function.name", "function.arguments", "tool_calls", "n\"q", "x"}
	f.Fuzz(func(t *testing.T, s string) {
		if !gjson.Valid(s) || TooDeep(s) {
			return
		}
		// gjson keeps the white space after a whole text's object or
		// array; readers parse a value's own bytes.
		s = strings.Trim(s, " \t\r\n")
		v, g := Parse(s), gjson.Parse(s)
		same(t, s, v, g)
		for _, p := range paths {
			if strings.ContainsAny(p, `"`) {
				continue // a gjson path would need escapes
			}
			same(t, s+" @ "+p, v.Get(p), g.Get(p))
		}
		var got, want []string
		v.ForEach(func(name string, i int, x Value) bool {
			got = append(got, name, x.Raw, x.String(), x.Get("text").String())
			return len(got) < 40
		})
		g.ForEach(func(k, x gjson.Result) bool {
			want = append(want, k.Str, x.Raw, x.String(), x.Get("text").String())
			return len(want) < 40
		})
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("%q: ForEach read %q, gjson %q", s, got, want)
		}
	})
}

func same(t *testing.T, what string, v Value, g gjson.Result) {
	t.Helper()
	if v.Exists() != g.Exists() || v.Raw != g.Raw || v.String() != g.String() || v.IsArray() != g.IsArray() ||
		v.IsString() != (g.Type == gjson.String) || v.Exists() && g.Index > 0 && v.At != g.Index {
		t.Fatalf("%q: read %q (at %d, %q), gjson %q (at %d, %q)", what, v.Raw, v.At, v.String(), g.Raw, g.Index, g.String())
	}
}
