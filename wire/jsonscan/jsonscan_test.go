package jsonscan

import (
	"encoding/json"
	"testing"
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
