package loopguard

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// The string readers and writers a byte at a time, without reading and
// copying in bulk (an escape's decoding and a multi-byte character's
// folding are shared): the reference the bulk ones must match byte for
// byte (stored fingerprints depend on it).

func appendNormalizedRef(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		switch byteClass[s[i]] {
		case clSafe:
			j := i + 1
			for j < len(s) && byteClass[s[j]] == clSafe {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		case clEscape:
			dst = appendEscaped(dst, s[i])
			i++
			continue
		}
		j := i + 1
		for j < len(s) && byteClass[s[j]] >= clLetter {
			j++
		}
		if n := matchAt(s[i:], j-i); n > 0 {
			dst = append(dst, phTime...)
			i += n
			continue
		} else if n < 0 {
			dst = append(dst, phUUID...)
			i -= n
			continue
		}
		if j-i >= 10 {
			dst = appendRun(dst, s[i:j])
		} else {
			dst = append(dst, s[i:j]...)
		}
		i = j
	}
	return append(dst, '"')
}

func foldTextRef(dst, src []byte) []byte {
	space := false
	for i := 0; i < len(src); {
		c := src[i]
		if c < utf8.RuneSelf {
			i++
			if c == ' ' || (c >= '\t' && c <= '\r') {
				space = true
				continue
			}
			if space && len(dst) > 0 {
				dst = append(dst, ' ')
			}
			space = false
			dst = append(dst, c)
			continue
		}
		dst, i, space = foldRune(dst, src, i, space)
	}
	return dst
}

func (p *parser) strRef() ([]byte, bool) {
	p.pos++ // opening quote
	start := p.pos
	for i := start; i < len(p.src); i++ {
		c := p.src[i]
		if byteClass[c] != clEscape && c < 0x80 {
			continue
		}
		if c == '"' {
			p.pos = i + 1
			return p.src[start:i], true
		}
		break
	}
	out := p.st.str[:0]
	i := start
	for i < len(p.src) {
		c := p.src[i]
		switch {
		case c == '"':
			p.pos = i + 1
			p.st.str = out
			return out, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			var ok bool
			if out, i, ok = appendUnescapedRef(out, p.src, i); !ok {
				return nil, false
			}
		case c < 0x80:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(p.src[i:])
			out = utf8.AppendRune(out, r)
			i += size
		}
	}
	return nil, false
}

func appendQuotedRef(dst, s []byte) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		dst = appendEscaped(dst, c)
	}
	return append(dst, '"')
}

func FuzzNormalizersMatchReference(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Add(bigLogs(2 << 10))
	f.Add([]byte(`JSON in a string: {\"a\":\"b\u00e9\ud83d\ude00\"}, caf\u00e9 naïve ÿþ tail" rest`))
	f.Add([]byte("  white  space:\tfolded   to one,\r\n\n  \x01control\x1fbytes kept\u2003\u00a0x  "))
	f.Add([]byte("invalid UTF-8 \xff\xfe, caf\xc3\xa9, a cut \xc3( and \xed\xa0\x80 (a surrogate)\" rest"))
	f.Add([]byte("id 550e8400-e29b-41d4-a716-446655440000 at 2024-05-01T12:00:00Z and 12:30:45, epoch 1714564800123 hex deadbeefdeadbeef00 \"q\"\\\x01 \u00e9\u2003x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		folded, want := foldText(nil, in), foldTextRef(nil, in)
		if !bytes.Equal(folded, want) {
			t.Fatalf("foldText(%q) = %q, want %q", in, folded, want)
		}
		for _, s := range [][]byte{folded, bytes.ToValidUTF8(in, []byte("\uFFFD"))} {
			if got, want := appendNormalized(nil, s), appendNormalizedRef(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("appendNormalized(%q) = %q, want %q", s, got, want)
			}
			if got, want := appendQuoted(nil, s), appendQuotedRef(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("appendQuoted(%q) = %q, want %q", s, got, want)
			}
		}
		// A string literal: the input after a quote, read as JSON reads it.
		src := append([]byte{'"'}, in...)
		p, ref := parser{src: src, text: string(src), st: &scratch{}}, parser{src: src, st: &scratch{}}
		got, ok := p.str()
		want, wantOK := ref.strRef()
		if ok != wantOK || ok && (!bytes.Equal(got, want) || p.pos != ref.pos) {
			t.Fatalf("str(%q) = %q, %v, end %d; want %q, %v, end %d", src, got, ok, p.pos, want, wantOK, ref.pos)
		}
	})
}

// bigLogs is about n bytes of log lines, as a log search tool returns
// them: timestamps, hosts, ids, numbers and words.
func bigLogs(n int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "2024-05-01T12:%02d:%02d.%03dZ web-%d checkout ERROR payment declined for order %d card_country=DE decline_code=51 trace=4bf92f3577b34da6a3ce929d0e0e%04d latency_ms=%d\n", i%60, i%60, i%1000, i%4, 100000+i, i%10000, 200+i%50)
	}
	return []byte(b.String())
}

// bigHits is about n bytes of JSON search hits.
func bigHits(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"hits":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"@timestamp":"2024-05-01T12:%02d:%02d.%03dZ","host":"web-%d","message":"payment declined for order %d, card issued in DE","decline_code":"51","latency_ms":%d,"trace_id":"4bf92f3577b34da6a3ce929d0e0e%04d"}`, i%60, i%60, i%1000, i%4, 100000+i, 200+i%50, i%10000)
	}
	b.WriteString(`],"total":12345}`)
	return []byte(b.String())
}

// BenchmarkObservation64KB is the loop guard's hash of one large tool
// result, which a run's next call pays before it goes to the provider:
// log lines (text) and search hits (JSON).
func BenchmarkObservation64KB(b *testing.B) {
	c := NewCanonicalizer(nil)
	for _, in := range []struct {
		name string
		v    []byte
	}{{"logs", bigLogs(64 << 10)}, {"json", bigHits(64 << 10)}} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.v)))
			b.ReportAllocs()
			for b.Loop() {
				c.Observation(in.v)
			}
		})
	}
}

// appendUnescapedRef is the escape reader as it was before strings were
// decoded by jsonscan: it appends the character the escape at src[i] (a
// backslash) stands for, and returns the index after the escape; false
// for a bad escape. A surrogate pair is one character; a lone surrogate
// becomes U+FFFD.
func appendUnescapedRef(out, src []byte, i int) ([]byte, int, bool) {
	if i+1 >= len(src) {
		return out, i, false
	}
	i++
	switch src[i] {
	case '"', '\\', '/':
		out = append(out, src[i])
	case 'b':
		out = append(out, '\b')
	case 'f':
		out = append(out, '\f')
	case 'n':
		out = append(out, '\n')
	case 'r':
		out = append(out, '\r')
	case 't':
		out = append(out, '\t')
	case 'u':
		r, ok := hex4Ref(src, i+1)
		if !ok {
			return out, i, false
		}
		i += 4
		if r >= 0xD800 && r < 0xDC00 && i+6 < len(src) && src[i+1] == '\\' && src[i+2] == 'u' {
			if r2, ok := hex4Ref(src, i+3); ok && r2 >= 0xDC00 && r2 < 0xE000 {
				r = (r-0xD800)<<10 | (r2 - 0xDC00) + 0x10000
				i += 6
			}
		}
		out = utf8.AppendRune(out, r) // lone surrogates become U+FFFD
	default:
		return out, i, false
	}
	return out, i + 1, true
}

func hex4Ref(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
