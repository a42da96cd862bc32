package accounting

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/haltline/haltline/wire"
)

// fixtureUsage reads a recorded response's usage block and normalises it as
// docs/design.md §12 says (the parsers in wire do the same on the request path;
// this keeps the accounting tests independent of them).
func fixtureUsage(t *testing.T, path string) (model string, provider string, u wire.Usage) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Model string `json:"model"`
		Usage struct {
			// OpenAI chat
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens     int64 `json:"cached_tokens"`
				CacheWriteTokens int64 `json:"cache_write_tokens"`
			} `json:"prompt_tokens_details"`
			CompletionTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
			// OpenAI responses and Anthropic
			InputTokens        int64 `json:"input_tokens"`
			OutputTokens       int64 `json:"output_tokens"`
			InputTokensDetails struct {
				CachedTokens     int64 `json:"cached_tokens"`
				CacheWriteTokens int64 `json:"cache_write_tokens"`
			} `json:"input_tokens_details"`
			OutputTokensDetails struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
			// Anthropic
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	x := r.Usage
	switch filepath.Dir(path) {
	case "openai-chat":
		return r.Model, "openai", wire.Usage{
			InputTokens: x.PromptTokens, OutputTokens: x.CompletionTokens,
			CachedTokens: x.PromptTokensDetails.CachedTokens, CacheWriteTokens: x.PromptTokensDetails.CacheWriteTokens,
			ReasoningTokens: x.CompletionTokensDetails.ReasoningTokens,
		}
	case "openai-responses":
		return r.Model, "openai", wire.Usage{
			InputTokens: x.InputTokens, OutputTokens: x.OutputTokens,
			CachedTokens: x.InputTokensDetails.CachedTokens, CacheWriteTokens: x.InputTokensDetails.CacheWriteTokens,
			ReasoningTokens: x.OutputTokensDetails.ReasoningTokens,
		}
	case "anthropic":
		// Anthropic's input_tokens excludes the cached parts.
		return r.Model, "anthropic", wire.Usage{
			InputTokens:  x.InputTokens + x.CacheReadInputTokens + x.CacheCreationInputTokens,
			OutputTokens: x.OutputTokens,
			CachedTokens: x.CacheReadInputTokens, CacheWriteTokens: x.CacheCreationInputTokens,
		}
	}
	t.Fatalf("no normaliser for %s", path)
	return
}

// testCatalog prices gpt-5.6-sol, a model of the recorded fixtures that the
// default catalog does not list. Its prices are illustrative (gpt-5.5's,
// with a cache-write price so that the cache-write path is exercised).
const testCatalogYAML = `
models:
  gpt-5.6-sol:
    context_window: 1000000
    input_usd_per_mtok: 5.00
    cached_input_usd_per_mtok: 0.50
    output_usd_per_mtok: 30.00
    cache_write_usd_per_mtok: 6.25
  gpt-5.6-nocw:
    context_window: 1000000
    input_usd_per_mtok: 5.00
    cached_input_usd_per_mtok: 0.50
    output_usd_per_mtok: 30.00
  gpt-5-nano-r:
    context_window: 400000
    input_usd_per_mtok: 0.05
    cached_input_usd_per_mtok: 0.005
    output_usd_per_mtok: 0.40
    reasoning_usd_per_mtok: 1.60
`

func TestCostFixtures(t *testing.T) {
	t.Parallel()
	tc, err := ParseCatalog([]byte(testCatalogYAML))
	if err != nil {
		t.Fatal(err)
	}
	// Expectations are hand-computed: $X per Mtok is X·1e6 pUSD per token.
	tests := []struct {
		desc      string
		fixture   string
		priceAs   string // catalog entry to price with; "" = Lookup of the fixture's model in the default catalog
		wantModel string
		want      Money
	}{
		{
			desc:    "openai chat, gpt-4o snapshot, no cache",
			fixture: "openai-chat/response-parallel-tool-calls.json", wantModel: "gpt-4o",
			// 71 × 2.50 + 46 × 10.00 = 177.5e6 + 460e6
			want: 637_500_000,
		},
		{
			desc:    "openai chat, reasoning inside output, reasoning priced as output by default",
			fixture: "openai-chat/response-usage-reasoning.json", wantModel: "gpt-5-nano",
			// 27 × 0.05 + (267−192) × 0.40 + 192 × 0.40 = 1.35e6 + 30e6 + 76.8e6
			want: 108_150_000,
		},
		{
			desc:    "openai chat, reasoning with its own price",
			fixture: "openai-chat/response-usage-reasoning.json", priceAs: "gpt-5-nano-r", wantModel: "gpt-5-nano-r",
			// 27 × 0.05 + 75 × 0.40 + 192 × 1.60 = 1.35e6 + 30e6 + 307.2e6
			want: 338_550_000,
		},
		{
			desc:    "openai chat, cache hit: cached inside prompt_tokens",
			fixture: "openai-chat/response-usage-cache-hit.json", priceAs: "gpt-5.6-sol", wantModel: "gpt-5.6-sol",
			// (4020−4012) × 5 + 4012 × 0.50 + 4 × 30 = 40e6 + 2006e6 + 120e6
			want: 2_166_000_000,
		},
		{
			desc:    "openai chat, cache write priced at cache-write price, not twice",
			fixture: "openai-chat/response-usage-cache-write.json", priceAs: "gpt-5.6-sol", wantModel: "gpt-5.6-sol",
			// (4020−4012) × 5 + 4012 × 6.25 + 4 × 30 = 40e6 + 25075e6 + 120e6
			want: 25_235_000_000,
		},
		{
			desc:    "openai chat, cache write without a cache-write price costs input",
			fixture: "openai-chat/response-usage-cache-write.json", priceAs: "gpt-5.6-nocw", wantModel: "gpt-5.6-nocw",
			// 4020 × 5 + 4 × 30 = 20100e6 + 120e6
			want: 20_220_000_000,
		},
		{
			desc:    "openai responses, reasoning, dated gpt-5.5",
			fixture: "openai-responses/response-function-call-reasoning.json", wantModel: "gpt-5.5",
			// 63 × 5 + 72 × 30 = 315e6 + 2160e6
			want: 2_475_000_000,
		},
		{
			desc:    "openai responses, cache hit",
			fixture: "openai-responses/response-usage-cache-hit.json", priceAs: "gpt-5.6-sol", wantModel: "gpt-5.6-sol",
			// 8 × 5 + 4012 × 0.50 + 5 × 30 = 40e6 + 2006e6 + 150e6
			want: 2_196_000_000,
		},
		{
			desc:    "anthropic, haiku snapshot, no cache",
			fixture: "anthropic/response-parallel-tool-use.json", wantModel: "claude-haiku-4-5",
			// 423 × 1 + 202 × 5 = 423e6 + 1010e6
			want: 1_433_000_000,
		},
		{
			desc:    "anthropic, cache write at 1.25× input",
			fixture: "anthropic/response-tool-use-cache-write.json", wantModel: "claude-sonnet-4-5",
			// 7 × 3 + 1069 × 3.75 + 60 × 15 = 21e6 + 4008.75e6 + 900e6
			want: 4_929_750_000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			model, provider, u := fixtureUsage(t, tt.fixture)
			var p Price
			var ok bool
			if tt.priceAs != "" {
				p, ok = tc.Lookup(tt.priceAs)
			} else {
				p, ok = DefaultCatalog().Lookup(model)
			}
			if !ok || p.Model != tt.wantModel {
				t.Fatalf("price for %q = %q, %v; want %q", model, p.Model, ok, tt.wantModel)
			}
			if got := p.Cost(provider, u); got != tt.want {
				t.Errorf("Cost = %d (%s USD), want %d (%s USD)", got, got, tt.want, tt.want)
			}
		})
	}
}

func TestCostUnknownFixtureModel(t *testing.T) {
	t.Parallel()
	model, _, _ := fixtureUsage(t, "openai-chat/response-usage-cache-hit.json")
	if p, ok := DefaultCatalog().Lookup(model); ok || p != (Price{}) {
		t.Errorf("Lookup(%q) = %+v, %v; want zero, false", model, p, ok)
	}
}

func TestCostClamps(t *testing.T) {
	t.Parallel()
	p := Price{Input: 10, CachedInput: 1, CacheWrite: 20, Output: 100, Reasoning: 1000}
	tests := []struct {
		desc     string
		provider string
		u        wire.Usage
		want     Money
	}{
		{desc: "zero usage", provider: "openai", want: 0},
		{desc: "negatives count as zero", provider: "openai",
			u: wire.Usage{InputTokens: -5, OutputTokens: -1, CachedTokens: -3, ReasoningTokens: -2, CacheWriteTokens: -9}, want: 0},
		{desc: "cached above input is capped at input", provider: "openai",
			u: wire.Usage{InputTokens: 10, CachedTokens: 50}, want: 10 * 1},
		{desc: "cache write capped at input less cached", provider: "openai",
			u: wire.Usage{InputTokens: 10, CachedTokens: 4, CacheWriteTokens: 50}, want: 4*1 + 6*20},
		{desc: "reasoning capped at output", provider: "openai",
			u: wire.Usage{OutputTokens: 3, ReasoningTokens: 7}, want: 3 * 1000},
		{desc: "anthropic prices all output as output", provider: "anthropic",
			u: wire.Usage{OutputTokens: 3, ReasoningTokens: 2}, want: 3 * 100},
		{desc: "unknown provider uses the general formula", provider: "",
			u: wire.Usage{InputTokens: 1, OutputTokens: 3, ReasoningTokens: 2}, want: 10 + 100 + 2000},
		{desc: "saturates instead of wrapping", provider: "openai",
			u: wire.Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, want: math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := p.Cost(tt.provider, tt.u); got != tt.want {
				t.Errorf("Cost = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestWorstCaseAndMaxOutput(t *testing.T) {
	t.Parallel()
	sonnet, _ := DefaultCatalog().Lookup("claude-sonnet-4-5")
	gpt, _ := DefaultCatalog().Lookup("gpt-4o")
	reasoning := Price{Input: 1_000_000, CacheWrite: 1_000_000, Output: 2_000_000, Reasoning: 8_000_000}
	tests := []struct {
		desc          string
		p             Price
		in, out       int64
		wantWorst     Money
		budget        Money
		wantMaxOutput int64
	}{
		{desc: "openai: input at input price, output at output price", p: gpt, in: 1000, out: 500,
			// 1000 × 2.5 + 500 × 10
			wantWorst: 7_500_000_000, budget: 7_500_000_000, wantMaxOutput: 500},
		{desc: "anthropic: input at the cache-write price, which is higher", p: sonnet, in: 1000, out: 500,
			// 1000 × 3.75 + 500 × 15
			wantWorst: 11_250_000_000, budget: 11_249_999_999, wantMaxOutput: 499},
		{desc: "output at max(output, reasoning)", p: reasoning, in: 10, out: 10,
			wantWorst: 10*1_000_000 + 10*8_000_000, budget: 10*1_000_000 + 25*8_000_000 + 7, wantMaxOutput: 25},
		{desc: "input alone exceeds the budget", p: gpt, in: 1000, out: 0,
			wantWorst: 2_500_000_000, budget: 2_499_999_999, wantMaxOutput: 0},
		{desc: "free output", p: Price{Input: 1}, in: 5, out: 5, wantWorst: 5, budget: 5, wantMaxOutput: math.MaxInt64},
		{desc: "saturating worst case", p: gpt, in: math.MaxInt64, out: 1, wantWorst: math.MaxInt64, budget: 0, wantMaxOutput: 0},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			if got := tt.p.WorstCase(tt.in, tt.out); got != tt.wantWorst {
				t.Errorf("WorstCase = %d, want %d", got, tt.wantWorst)
			}
			got := tt.p.MaxOutputFor(tt.budget, tt.in)
			if got != tt.wantMaxOutput {
				t.Errorf("MaxOutputFor = %d, want %d", got, tt.wantMaxOutput)
			}
			if got > 0 && got < math.MaxInt64 {
				if w := tt.p.WorstCase(tt.in, got); w > tt.budget {
					t.Errorf("WorstCase(in, MaxOutputFor) = %d > budget %d", w, tt.budget)
				}
				if w := tt.p.WorstCase(tt.in, got+1); w <= tt.budget {
					t.Errorf("MaxOutputFor is not the largest: %d more still fits", got+1)
				}
			}
		})
	}
}

func TestReserveInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		est, want int64
	}{
		{est: 0, want: 0},
		{est: 1, want: 2},     // a tenth of a token rounds up
		{est: 100, want: 110}, // the margin, exactly
		{est: 1541, want: 1696},
		{est: 4020, want: 4422},
		{est: math.MaxInt64, want: math.MaxInt64}, // saturates
	}
	for _, tt := range tests {
		if got := ReserveInput(tt.est); got != tt.want {
			t.Errorf("ReserveInput(%d) = %d, want %d", tt.est, got, tt.want)
		}
	}
	// Never below the estimate, never above it by more than the margin
	// and the rounding.
	for est := int64(1); est < 5000; est += 7 {
		got := ReserveInput(est)
		if got < est || got > est+est*InputMarginPercent/100+1 {
			t.Fatalf("ReserveInput(%d) = %d", est, got)
		}
	}
}
