package accounting

import (
	"math"
	"testing"
)

func TestParseUSD(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		in      string
		want    Money
		wantErr bool
	}{
		{desc: "half a dollar", in: "0.5", want: 500_000_000_000},
		{desc: "whole dollars", in: "12", want: 12 * USDUnit},
		{desc: "one pico", in: "0.000000000001", want: 1},
		{desc: "float-unfriendly 0.1+0.2 style value is exact", in: "0.3", want: 300_000_000_000},
		{desc: "0.075 is exact (float64 would read 0.07499999…)", in: "0.075", want: 75_000_000_000},
		{desc: "trailing zeros past 12 decimals", in: "1.50000000000000000", want: 1_500_000_000_000},
		{desc: "negative", in: "-0.000001", want: -MicroUSD},
		{desc: "leading plus", in: "+2", want: 2 * USDUnit},
		{desc: "no integer part", in: ".25", want: 250_000_000_000},
		{desc: "largest", in: "9223372.036854775807", want: math.MaxInt64},
		{desc: "too precise", in: "0.0000000000001", wantErr: true},
		{desc: "exponent", in: "1e-3", wantErr: true},
		{desc: "empty", in: "", wantErr: true},
		{desc: "sign only", in: "-", wantErr: true},
		{desc: "two points", in: "1.2.3", wantErr: true},
		{desc: "space", in: " 1", wantErr: true},
		{desc: "overflow", in: "9223372.036854775808", wantErr: true},
		{desc: "huge", in: "100000000000", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := ParseUSD(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseUSD(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseUSD(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestMoneyString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		in   Money
		want string
	}{
		{desc: "zero", in: 0, want: "0"},
		{desc: "design example", in: 71_234_000_000, want: "0.071234"},
		{desc: "whole", in: 12 * USDUnit, want: "12"},
		{desc: "one pico", in: 1, want: "0.000000000001"},
		{desc: "negative", in: -MicroUSD, want: "-0.000001"},
		{desc: "min int64", in: math.MinInt64, want: "-9223372.036854775808"},
		{desc: "max int64", in: math.MaxInt64, want: "9223372.036854775807"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := tt.in.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if tt.in == math.MinInt64 {
				return
			}
			back, err := ParseUSD(tt.want)
			if err != nil || back != tt.in {
				t.Errorf("ParseUSD(String()) = %d, %v; want %d", back, err, tt.in)
			}
		})
	}
}

func TestUSDFloat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		in   float64
		want Money
	}{
		{desc: "rounds to nearest pico", in: 0.1, want: 100_000_000_000},
		{desc: "half a pico rounds away from zero", in: 1.5e-12, want: 2},
		{desc: "NaN is zero", in: math.NaN(), want: 0},
		{desc: "saturates", in: 1e300, want: math.MaxInt64},
		{desc: "saturates negative", in: -1e300, want: math.MinInt64},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := USD(tt.in); got != tt.want {
				t.Errorf("USD(%v) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
	if got := Money(250_000_000_000).USD(); got != 0.25 {
		t.Errorf("USD() = %v, want 0.25", got)
	}
}
