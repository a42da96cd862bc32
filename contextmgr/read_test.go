package contextmgr

import (
	"encoding/json"
	"fmt"
	"hash/crc64"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
	"github.com/tidwall/gjson"
)

// checkRead holds the one-pass reader to what it replaces: the body is
// valid exactly when gjson says so, its estimate is Estimate's, and the
// weights of the items and of the envelope add up to it.
func checkRead(t *testing.T, api wire.API, body []byte) {
	t.Helper()
	c := getConv()
	defer putConv(c)
	est, valid, ok := c.read(api, body)
	if want := gjson.ValidBytes(body); valid != want {
		t.Fatalf("valid %v, gjson says %v: %q", valid, want, body)
	}
	if !valid {
		return
	}
	if want := Estimate(api, body); est != want {
		t.Fatalf("estimate %d, Estimate %d: %q", est, want, body)
	}
	if !ok || !c.exact {
		return
	}
	cheap := api != wire.APIMessages
	w, tools := c.envW, c.envTools
	for i := range c.items {
		it := &c.items[i]
		if iw, it2 := scan(it.raw, cheap); iw != it.w || it2 != it.tools {
			t.Fatalf("item %d weighs %d (tools %v), scan says %d (%v): %q", i, it.w, it.tools, iw, it2, it.raw)
		}
		for k := range it.results {
			r := &it.results[k]
			if r.lazy {
				v, _ := scan([]byte(`{"content":`+string(body[r.vs:r.ve])+`}`), cheap)
				if v-keyWeight != r.valW {
					t.Fatalf("result %d.%d weighs %d, scan says %d", i, k, r.valW, v-keyWeight)
				}
			}
		}
		w += it.w
		tools = tools || it.tools
	}
	if got := finish(api, w, tools); got != est {
		t.Fatalf("parts weigh %d, the body %d: %q", got, est, body)
	}
}

func TestReadGenerated(t *testing.T) {
	t.Parallel()
	for _, api := range apis {
		for seed := range uint64(40) {
			r := rand.New(rand.NewPCG(seed, 9))
			checkRead(t, api, genConversation(r, 2+r.IntN(10), 3000).render(api))
		}
	}
	for _, body := range []string{
		`{"messages":[1,"x",{"role":"user","content":"t"}],"id":"a"}`,
		`{"m\u0065ssages":[{"role":"user","content":"t"}]}`,
		`{"messages":[{"r\u006fle":"user","content":"t"}]}`,
		`{"messages":[{"role":"user","content":"t"}],"tools":[{"x":1}]}`,
		`{"messages":[{"role":"user","tools":[1],"content":"t"}]}`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u00e9\\\\\\\"\\n\"}] }\n",
		`[1,2]`, `"x"`, `{}`, `{"messages":{}}`, ` {"messages":[]} `,
	} {
		for _, api := range apis {
			checkRead(t, api, []byte(body))
		}
	}
}

// FuzzRead: the reader agrees with gjson on validity and with scan on
// weights, whatever the bytes.
func FuzzRead(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, apiByte uint8, body []byte, _ int64) {
		checkRead(t, wire.API(apiByte%4), body)
	})
}

// TestLexString compares the string lexer with a byte-by-byte reading of
// the grammar, on strings dense in escapes at every offset of a word.
func TestLexString(t *testing.T) {
	t.Parallel()
	alpha := []string{`\\`, `\"`, `\n`, `\u00e9`, `\uD83D\uDE00`, `\u12`, `\x`, "\x01", `a`, `é`, `"`, `\`, `\/`, "\t", `        `}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		var b strings.Builder
		b.WriteString(strings.Repeat(" ", r.IntN(9)))
		start := b.Len()
		b.WriteByte('"')
		for k := r.IntN(30); k > 0; k-- {
			b.WriteString(alpha[r.IntN(len(alpha))])
		}
		if r.IntN(4) > 0 {
			b.WriteByte('"')
		}
		b.WriteString(strings.Repeat("x", r.IntN(9)))
		s := []byte(b.String())
		end, w, esc, ok := lexString(s, string(s), start)
		// The reference: the closing quote and validity by hand.
		i, refOK, refEsc := start+1, true, false
		for ; i < len(s); i++ {
			c := s[i]
			if c == '"' {
				break
			}
			if c < ' ' {
				refOK = false
				break
			}
			if c == '\\' {
				refEsc = true
				if i+1 >= len(s) || !strings.ContainsRune(`"\/bfnrtu`, rune(s[i+1])) {
					refOK = false
					break
				}
				if s[i+1] == 'u' {
					if i+5 >= len(s) || !isHex(s[i+2:i+6]) {
						refOK = false
						break
					}
				}
				i++
			}
		}
		if i >= len(s) {
			refOK = false
		}
		if ok != refOK {
			t.Fatalf("%q: ok %v, want %v", s[start:], ok, refOK)
		}
		if !ok {
			continue
		}
		if end != i+1 || esc != refEsc {
			t.Fatalf("%q: end %d esc %v, want %d %v", s[start:], end, esc, i+1, refEsc)
		}
		if ww, we := weighString(s, start+1); uint64(ww) != w || we != i {
			t.Fatalf("%q: weight %d, weighString %d (end %d)", s[start:], w, ww, we)
		}
		if want := gjson.ParseBytes(s[start:end]).String(); string(jsonscan.AppendUnescaped(nil, s[start+1:end-1])) != want {
			t.Fatalf("%q: decoded %q, gjson %q", s[start:end], jsonscan.AppendUnescaped(nil, s[start+1:end-1]), want)
		}
	}
}

func TestCRCAppend(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{0, 1, 2, 7, 8, 63, 64, 1000, 4096, 70001} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		for range 5 {
			h := r.Uint64()
			if got, want := crcAppend(h, crc64.Update(0, crcTable, b), n), crc64.Update(h, crcTable, b); got != want {
				t.Fatalf("n %d: %x, want %x", n, got, want)
			}
		}
	}
}

func TestRuneCountAndClipLine(t *testing.T) {
	t.Parallel()
	alpha := []string{"a", " ", "\n", "é", "\u00a0", "\u2003", "\xff", "\xe2\x82", "word", "\u3000", "\t\t"}
	r := rand.New(rand.NewPCG(4, 4))
	for range 20000 {
		var b strings.Builder
		for k := r.IntN(80); k > 0; k-- {
			b.WriteString(alpha[r.IntN(len(alpha))])
		}
		s := b.String()
		if got, want := runeCount([]byte(s)), utf8.RuneCountInString(s); got != want {
			t.Fatalf("%q: %d runes, want %d", s, got, want)
		}
		for _, max := range []int{4, 10, 80} {
			if got, want := clipLine(s, max), clip(oneLine(s), max); got != want {
				t.Fatalf("%q (%d): %q, want %q", s, max, got, want)
			}
		}
	}
}

// TestMarshalWeight holds the encoder to encoding/json and the weight of
// an encoding, computed without writing it, to the weight of its bytes.
func TestMarshalWeight(t *testing.T) {
	t.Parallel()
	alpha := []string{"a", " ", "\n", "é", "\"", "\\", "<", "&", "\x01", "\u2028", "\u2029", "\xff", "\xe2\x82", "\ufffd", "日本", "\t"}
	r := rand.New(rand.NewPCG(5, 5))
	for range 20000 {
		var b strings.Builder
		for k := r.IntN(40); k > 0; k-- {
			b.WriteString(alpha[r.IntN(len(alpha))])
		}
		s := b.String()
		enc := appendMarshal(nil, []byte(s))
		if want, _ := json.Marshal(s); `"`+string(enc)+`"` != string(want) {
			t.Fatalf("%q: %s, want %s", s, enc, want)
		}
		if got, want := marshalWeight([]byte(s)), weigh(enc); got != want {
			t.Fatalf("%q: weight %d, want %d", s, got, want)
		}
	}
}

func isHex(s []byte) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// The slow reader (member by member through jsonscan.Value) reads the
// items the fast readers read: the same kinds, roles, texts, calls and
// results, on every shape the generator makes.
func TestSlowReaderReadsAsFast(t *testing.T) {
	t.Parallel()
	summary := func(c *conv) string {
		var b strings.Builder
		for i := range c.items {
			it := &c.items[i]
			fmt.Fprintf(&b, "%d %s %q %q calls %q|", it.kind, it.role, it.text, it.raw, it.calls)
			for k := range it.results {
				r := &it.results[k]
				fmt.Fprintf(&b, " result %q %q %q", r.id, c.textOf(r), r.path)
			}
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "list %d-%d head %d noDrop %v", c.listStart, c.listEnd, c.head, c.noDrop)
		return b.String()
	}
	for _, api := range apis {
		for seed := range uint64(40) {
			r := rand.New(rand.NewPCG(seed, 11))
			body := genConversation(r, 2+r.IntN(10), 3000).render(api)
			fast, slow := getConv(), getConv()
			if _, valid, ok := fast.read(api, body); !valid || !ok {
				t.Fatalf("%v seed %d: not read: %q", api, seed, body)
			}
			slow.api, slow.listPath = fast.api, fast.listPath
			if !parseConvSlow(api, body, slow) {
				t.Fatalf("%v seed %d: the slow reader found no list", api, seed)
			}
			if got, want := summary(slow), summary(fast); got != want {
				t.Fatalf("%v seed %d: the slow reader read\n%s\nthe fast\n%s", api, seed, got, want)
			}
			putConv(fast)
			putConv(slow)
		}
	}
}
