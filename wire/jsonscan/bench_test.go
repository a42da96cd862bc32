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
