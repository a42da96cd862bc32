package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkStrings reads one long string literal of each kind a history
// holds: JSON tool output (an escaped quote every few bytes), source code
// (\n, \t and some \"), and prose without escapes.
func BenchmarkStrings(b *testing.B) {
	jsonOut, _ := json.Marshal(strings.Repeat(`{"order": "A-1001", "status": "shipped", "note": "left at \"door\""}`+"\n", 3000))
	code := `"` + strings.Repeat(`func f(x int) int {\n\treturn x * 2 // \"doubled\"\n}\n`, 4000) + `"`
	prose := `"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 5000) + `"`
	for _, tc := range []struct {
		desc string
		lit  string
	}{{"json", string(jsonOut)}, {"code", code}, {"prose", prose}} {
		s := tc.lit + ","
		for _, f := range []struct {
			desc string
			fn   func(string, int) int
		}{{"skip", SkipString}, {"valid", ValidString}} {
			b.Run(tc.desc+"/"+f.desc, func(b *testing.B) {
				if got := f.fn(s, 0); got != len(tc.lit) {
					b.Fatalf("end %d, want %d", got, len(tc.lit))
				}
				b.SetBytes(int64(len(s)))
				for b.Loop() {
					f.fn(s, 0)
				}
			})
		}
	}
}

// BenchmarkAppendEscaped writes strings of the kinds a call's log line and
// a run's record hold: short ids and names, a sentence, and text with
// escapes and non-ASCII letters.
func BenchmarkAppendEscaped(b *testing.B) {
	for _, tc := range []struct{ desc, s string }{
		{"id", "run-7f3a9c2e41d8"},
		{"model", "gpt-4o-mini-2024-07-18"},
		{"sentence", "The customer asked where order A-1001 is; it shipped on Monday."},
		{"mixed", "line one\nline \"two\"\tcafé <b>&</b> \u2028 end"},
	} {
		for _, html := range []bool{false, true} {
			name := tc.desc
			if html {
				name += "/html"
			}
			b.Run(name, func(b *testing.B) {
				buf := make([]byte, 0, 256)
				b.SetBytes(int64(len(tc.s)))
				for b.Loop() {
					buf = AppendEscaped(buf[:0], tc.s, html)
				}
			})
		}
	}
}

// BenchmarkAppendUnescaped decodes the string bodies a history holds:
// JSON tool output (an escaped quote every few bytes), source code (\n,
// \t, some \"), prose without escapes, and text with \u escapes.
func BenchmarkAppendUnescaped(b *testing.B) {
	jsonOut, _ := json.Marshal(strings.Repeat(`{"order": "A-1001", "status": "shipped", "note": "left at \"door\""}`+"\n", 300))
	for _, tc := range []struct{ desc, s string }{
		{"json", string(jsonOut[1 : len(jsonOut)-1])},
		{"code", strings.Repeat(`func f(x int) int {\n\treturn x * 2 // \"doubled\"\n}\n`, 400)},
		{"prose", strings.Repeat("The quick brown fox jumps over the lazy dog. ", 500)},
		{"unicode", strings.Repeat(`caf\u00e9 \ud83d\ude00 na\u00efve `, 400)},
	} {
		b.Run(tc.desc, func(b *testing.B) {
			buf := make([]byte, 0, len(tc.s)+8)
			b.SetBytes(int64(len(tc.s)))
			for b.Loop() {
				buf = AppendUnescaped(buf[:0], tc.s)
			}
		})
	}
}
