package accounting

import (
	"strings"
	"testing"
)

func TestParseBudgetHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		in       string
		want     Budget
		wantErrs []string
	}{
		{
			desc: "design example",
			in:   "max_steps=20,deadline_ms=60000,max_tokens=50000,max_cost_usd=0.5",
			want: Budget{Vector: Vector{Steps: 20, Tokens: 50000, Cost: 500_000_000_000}, DeadlineMs: 60000},
		},
		{
			desc: "every key, spaces, trailing comma",
			in:   " max_input_tokens=100 , max_output_tokens = 20,max_tool_calls=3, max_cost_usd=0.000001,",
			want: Budget{Vector: Vector{InputTokens: 100, OutputTokens: 20, ToolCalls: 3, Cost: MicroUSD}},
		},
		{desc: "empty", in: "", want: Budget{}},
		{
			desc:     "unknown key",
			in:       "max_steps=2,max_dollars=3",
			wantErrs: []string{`unknown key "max_dollars"`},
		},
		{
			desc: "every bad value named at once",
			in:   "max_steps=abc,deadline_ms=-1,max_tokens=1.5,max_cost_usd=1e-3,max_tool_calls=0,max_cost_usd=0.1,oops",
			wantErrs: []string{
				`max_steps="abc" is not a whole number`,
				`deadline_ms="-1": must be positive`,
				`max_tokens="1.5" is not a whole number`,
				`max_cost_usd="1e-3"`,
				`max_tool_calls="0": must be positive`,
				`max_cost_usd given twice`,
				`"oops" is not key=value`,
			},
		},
		{desc: "zero cost would mean unlimited", in: "max_cost_usd=0", wantErrs: []string{"max_cost_usd"}},
		{desc: "over-precise cost", in: "max_cost_usd=0.0000000000001", wantErrs: []string{"max_cost_usd"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			got, err := ParseBudgetHeader(tt.in)
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
				}
				for _, w := range tt.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				if n := strings.Count(err.Error(), "\n") + 1; n != len(tt.wantErrs) {
					t.Errorf("%d errors, want %d:\n%v", n, len(tt.wantErrs), err)
				}
				if got != (Budget{}) {
					t.Errorf("budget %+v returned with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBudgetTighten(t *testing.T) {
	t.Parallel()
	policy := Budget{Vector: Vector{Steps: 100, Cost: 2 * USDUnit, ToolCalls: 50}, DeadlineMs: 1_800_000}
	tests := []struct {
		desc   string
		header Budget
		want   Budget
	}{
		{desc: "empty header changes nothing", header: Budget{}, want: policy},
		{
			desc:   "smaller values tighten",
			header: Budget{Vector: Vector{Steps: 20, Cost: USDUnit / 2}, DeadlineMs: 60000},
			want:   Budget{Vector: Vector{Steps: 20, Cost: USDUnit / 2, ToolCalls: 50}, DeadlineMs: 60000},
		},
		{
			desc:   "larger values never loosen",
			header: Budget{Vector: Vector{Steps: 1000, Cost: 10 * USDUnit, ToolCalls: 51}, DeadlineMs: 9_999_999},
			want:   policy,
		},
		{
			desc:   "a dimension unlimited by policy takes the header's",
			header: Budget{Vector: Vector{Tokens: 50000, InputTokens: 40000, OutputTokens: 10000}},
			want: Budget{Vector: Vector{Steps: 100, Cost: 2 * USDUnit, ToolCalls: 50,
				Tokens: 50000, InputTokens: 40000, OutputTokens: 10000}, DeadlineMs: 1_800_000},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := policy.Tighten(tt.header); got != tt.want {
				t.Errorf("Tighten = %+v, want %+v", got, tt.want)
			}
			// Symmetric: which side is policy does not matter.
			if got := tt.header.Tighten(policy); got != tt.want {
				t.Errorf("reverse Tighten = %+v, want %+v", got, tt.want)
			}
		})
	}
}
