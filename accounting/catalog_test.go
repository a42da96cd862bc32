package accounting

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultCatalog(t *testing.T) {
	t.Parallel()
	c := DefaultCatalog()
	want := []string{
		"claude-haiku-4-5", "claude-opus-4-6", "claude-opus-5", "claude-sonnet-4-5", "claude-sonnet-4-6",
		"gpt-4.1", "gpt-4o", "gpt-4o-mini", "gpt-5", "gpt-5-nano", "gpt-5.4", "gpt-5.5",
	}
	if got := strings.Join(c.Models(), " "); got != strings.Join(want, " ") {
		t.Fatalf("Models() = %s\nwant       %s", got, strings.Join(want, " "))
	}
	// gpt-4o-mini as docs/design.md §10 gives it (without the illustrative
	// cache-write surcharge, see prices.yaml).
	p, _ := c.Lookup("gpt-4o-mini")
	wantMini := Price{Model: "gpt-4o-mini", ContextWindow: 128000,
		Input: 150_000, CachedInput: 75_000, CacheWrite: 150_000, Output: 600_000, Reasoning: 600_000}
	if p != wantMini {
		t.Errorf("gpt-4o-mini = %+v, want %+v", p, wantMini)
	}
	// Anthropic cache writes at 1.25× input (5-minute TTL).
	for _, m := range []string{"claude-opus-5", "claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-haiku-4-5"} {
		p, _ := c.Lookup(m)
		if p.CacheWrite*4 != p.Input*5 {
			t.Errorf("%s cache write %d, want 1.25 × %d", m, p.CacheWrite, p.Input)
		}
		if p.Reasoning != p.Output {
			t.Errorf("%s reasoning %d, want output %d", m, p.Reasoning, p.Output)
		}
	}
	// OpenAI: no cache-write surcharge.
	if p, _ := c.Lookup("gpt-5"); p.CacheWrite != p.Input {
		t.Errorf("gpt-5 cache write %d, want input %d", p.CacheWrite, p.Input)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	c := DefaultCatalog()
	tests := []struct {
		desc   string
		model  string
		want   string
		wantOK bool
	}{
		{desc: "exact", model: "gpt-4o", want: "gpt-4o", wantOK: true},
		{desc: "openai dated snapshot", model: "gpt-4o-2024-08-06", want: "gpt-4o", wantOK: true},
		{desc: "exact beats family", model: "gpt-4o-mini", want: "gpt-4o-mini", wantOK: true},
		{desc: "longest prefix wins", model: "gpt-4o-mini-2024-07-18", want: "gpt-4o-mini", wantOK: true},
		{desc: "nano snapshot over gpt-5", model: "gpt-5-nano-2025-08-07", want: "gpt-5-nano", wantOK: true},
		{desc: "dotted version snapshot", model: "gpt-5.5-2026-04-23", want: "gpt-5.5", wantOK: true},
		{desc: "anthropic dated snapshot", model: "claude-sonnet-4-5-20250929", want: "claude-sonnet-4-5", wantOK: true},
		{desc: "anthropic haiku snapshot", model: "claude-haiku-4-5-20251001", want: "claude-haiku-4-5", wantOK: true},
		{desc: "dot is not a snapshot separator", model: "gpt-5.6-sol", wantOK: false},
		{desc: "prefix without dash", model: "gpt-4omni", wantOK: false},
		{desc: "trailing dash only", model: "gpt-4o-", want: "gpt-4o", wantOK: true},
		{desc: "unknown", model: "llama-3", wantOK: false},
		{desc: "empty", model: "", wantOK: false},
		{desc: "leading dash", model: "-gpt-4o", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			p, ok := c.Lookup(tt.model)
			if ok != tt.wantOK || p.Model != tt.want {
				t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.model, p.Model, ok, tt.want, tt.wantOK)
			}
			if !ok && p != (Price{}) {
				t.Errorf("Lookup(%q) miss returned %+v, want zero Price", tt.model, p)
			}
		})
	}
	var nilCatalog *Catalog
	if _, ok := nilCatalog.Lookup("gpt-4o"); ok {
		t.Error("nil catalog found a price")
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	c := DefaultCatalog()
	for _, m := range []string{"gpt-4o", "claude-sonnet-4-5-20250929", "unknown-model-x-y"} {
		if n := testing.AllocsPerRun(100, func() { c.Lookup(m) }); n != 0 {
			t.Errorf("Lookup(%q) allocates %v times", m, n)
		}
	}
}

func TestParseCatalog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		yaml     string
		want     map[string]Price
		wantErrs []string // each must appear in the joined error
	}{
		{
			desc: "full entry, exact decimals",
			yaml: `
models:
  m:
    context_window: 128000
    input_usd_per_mtok: 0.15
    cached_input_usd_per_mtok: 0.075
    output_usd_per_mtok: 0.60
    reasoning_usd_per_mtok: 2.5
    cache_write_usd_per_mtok: 0.1875
`,
			want: map[string]Price{"m": {Model: "m", ContextWindow: 128000,
				Input: 150_000, CachedInput: 75_000, Output: 600_000, Reasoning: 2_500_000, CacheWrite: 187_500}},
		},
		{
			desc: "defaults: reasoning = output, cache write = input, cached = input",
			yaml: `
models:
  m: {context_window: 1000, input_usd_per_mtok: 3, output_usd_per_mtok: 15}
`,
			want: map[string]Price{"m": {Model: "m", ContextWindow: 1000,
				Input: 3_000_000, CachedInput: 3_000_000, Output: 15_000_000, Reasoning: 15_000_000, CacheWrite: 3_000_000}},
		},
		{
			desc: "smallest step: 0.000001 USD per Mtok is 1 pUSD per token; quoted strings accepted",
			yaml: `
models:
  m: {context_window: 1, input_usd_per_mtok: "0.000001", output_usd_per_mtok: 0.005}
`,
			want: map[string]Price{"m": {Model: "m", ContextWindow: 1,
				Input: 1, CachedInput: 1, Output: 5000, Reasoning: 5000, CacheWrite: 1}},
		},
		{
			desc: "every error at once",
			yaml: `
models:
  a:
    input_usd_per_mtok: -1
    output_usd_per_mtok: 1
  b:
    context_window: 0
    input_usd_per_mtok: 1
    output_usd_per_mtok: 1e-3
    cached_input_usd_per_mtok: 0.0000001
  c:
    context_window: 10
    input_usd_per_mtok: 1
    output_usd_per_mtoks: 1
    reasoning_usd_per_mtok: [1]
`,
			wantErrs: []string{
				"models.a.context_window: missing",
				`models.a.input_usd_per_mtok (line 4): "-1" is negative`,
				`models.b.context_window (line 7): "0" is not a positive whole number`,
				`models.b.output_usd_per_mtok (line 9): "1e-3" is not a decimal price`,
				`models.b.cached_input_usd_per_mtok (line 10): "0.0000001" has more than 6 decimal places`,
				"models.c.output_usd_per_mtoks (line 14): unknown key",
				"models.c.output_usd_per_mtok: missing",
				"models.c.reasoning_usd_per_mtok (line 15): not a number",
			},
		},
		{desc: "no models", yaml: "models: {}\n", wantErrs: []string{"no models"}},
		{desc: "unknown top-level key", yaml: "model:\n  m: {}\n", wantErrs: []string{"parse"}},
		{desc: "not YAML", yaml: "models: [\n", wantErrs: []string{"parse"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			c, err := ParseCatalog([]byte(tt.yaml))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
				}
				for _, w := range tt.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				if got, want := strings.Count(err.Error(), "\n")+1, len(tt.wantErrs); len(tt.wantErrs) > 1 && got != want {
					t.Errorf("%d errors, want %d:\n%v", got, want, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tt.want {
				if got, ok := c.Lookup(name); !ok || got != want {
					t.Errorf("Lookup(%q) = %+v, %v; want %+v", name, got, ok, want)
				}
			}
		})
	}
}

func TestLoadCatalog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "prices.yaml")
	if err := os.WriteFile(path, []byte("models:\n  x: {context_window: 8, input_usd_per_mtok: 1, output_usd_per_mtok: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadCatalog(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.Lookup("x-2025"); !ok || p.Output != 2_000_000 {
		t.Errorf("Lookup = %+v, %v", p, ok)
	}
	if _, err := LoadCatalog(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file: no error")
	}
}
