package contextmgr

import "testing"

func TestWatermark(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		window int64
		p      Params
		want   int64
	}{
		{desc: "default is 0.6 of the window", window: 128000, want: 76800},
		{desc: "explicit fraction", window: 100000, p: Params{Fraction: 0.5}, want: 50000},
		{desc: "reserve for tool output, answer and margin", window: 200000, p: Params{P99ToolOutput: 20000, ExpectedOutput: 8000, Margin: 2000}, want: 170000},
		{desc: "70% soft line tightens by 0.8", window: 32000, p: Params{Tighten: true}, want: 15360},
		{desc: "custom tighten factor", window: 100000, p: Params{Tighten: true, TightenFactor: 0.5}, want: 30000},
		{desc: "reserve larger than the window keeps a floor", window: 10000, p: Params{ExpectedOutput: 50000}, want: 1000},
		{desc: "unknown window: no watermark", window: 0, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := Watermark(tc.window, tc.p); got != tc.want {
				t.Fatalf("Watermark(%d, %+v) = %d, want %d", tc.window, tc.p, got, tc.want)
			}
		})
	}
}
