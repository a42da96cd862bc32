package accounting

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// Price is one catalog entry with its prices per token in pico-USD
// ($1 per million tokens = 1,000,000 pUSD per token). Every field is filled
// in: Reasoning defaults to Output and CacheWrite to Input when the catalog
// does not give them, so pricing never needs to ask what was set.
type Price struct {
	Model         string // the catalog name that matched, e.g. "gpt-4o" for "gpt-4o-2024-08-06"
	ContextWindow int64  // tokens

	Input       Money // uncached prompt tokens
	CachedInput Money // cache reads
	CacheWrite  Money // cache writes (Input when the catalog has no cache-write price)
	Output      Money // output tokens other than reasoning
	Reasoning   Money // reasoning tokens (Output when the catalog has no reasoning price)
}

// Catalog is an immutable set of prices, safe for concurrent use.
type Catalog struct {
	byName map[string]Price
}

//go:embed prices.yaml
var defaultPrices []byte

var defaultCatalog = func() *Catalog {
	c, err := ParseCatalog(defaultPrices)
	if err != nil {
		// The embedded file is tested; failing here means a broken build.
		panic("accounting: embedded prices.yaml: " + err.Error())
	}
	return c
}()

// DefaultCatalog returns the catalog embedded in the binary (prices.yaml).
func DefaultCatalog() *Catalog { return defaultCatalog }

// LoadCatalog reads and parses a catalog file (the --prices flag).
func LoadCatalog(path string) (*Catalog, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("price catalog: %w", err)
	}
	c, err := ParseCatalog(b)
	if err != nil {
		return nil, fmt.Errorf("price catalog %s: %w", path, err)
	}
	return c, nil
}

// Catalog keys, as in docs/design.md §10.
const (
	keyContextWindow = "context_window"
	keyInput         = "input_usd_per_mtok"
	keyCachedInput   = "cached_input_usd_per_mtok"
	keyOutput        = "output_usd_per_mtok"
	keyReasoning     = "reasoning_usd_per_mtok"
	keyCacheWrite    = "cache_write_usd_per_mtok"
)

// scalar keeps a YAML scalar's source text and line. Prices are read from
// that text as exact decimals: decoding into float64 first would turn 0.075
// into 0.07499999999999999722 before we ever saw it.
type scalar struct {
	text string
	line int
	ok   bool // a number or a string; false for null, maps, sequences
}

// UnmarshalYAML implements yaml.NodeUnmarshaler.
func (s *scalar) UnmarshalYAML(n ast.Node) error {
	if tk := n.GetToken(); tk != nil {
		s.line = tk.Position.Line
	}
	switch v := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		s.text, s.ok = v.GetToken().Value, true
	case *ast.StringNode:
		s.text, s.ok = v.Value, true
	}
	return nil
}

type catalogFile struct {
	Models map[string]map[string]*scalar `yaml:"models"`
}

// ParseCatalog parses a catalog in the docs/design.md §10 shape. It reports every
// problem at once (errors.Join): unknown keys, missing or non-positive
// context windows, missing, negative or over-precise prices.
func ParseCatalog(data []byte) (*Catalog, error) {
	var f catalogFile
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if len(f.Models) == 0 {
		return nil, errors.New("no models: the catalog needs a non-empty models map")
	}
	names := make([]string, 0, len(f.Models))
	for name := range f.Models {
		names = append(names, name)
	}
	sort.Strings(names) // errors in a stable order

	var errs []error
	c := &Catalog{byName: make(map[string]Price, len(names))}
	for _, name := range names {
		p, err := parseEntry(name, f.Models[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.byName[name] = p
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

func parseEntry(name string, fields map[string]*scalar) (Price, error) {
	var errs []error
	fail := func(key string, s *scalar, format string, a ...any) {
		where := ""
		if s != nil && s.line > 0 {
			where = " (line " + strconv.Itoa(s.line) + ")"
		}
		errs = append(errs, fmt.Errorf("models.%s.%s%s: %s", name, key, where, fmt.Sprintf(format, a...)))
	}
	if strings.TrimSpace(name) == "" {
		errs = append(errs, errors.New("models: empty model name"))
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch k {
		case keyContextWindow, keyInput, keyCachedInput, keyOutput, keyReasoning, keyCacheWrite:
		default:
			fail(k, fields[k], "unknown key")
		}
	}

	p := Price{Model: name}
	if s := fields[keyContextWindow]; s == nil || !s.ok {
		fail(keyContextWindow, s, "missing")
	} else if n, err := strconv.ParseInt(s.text, 10, 64); err != nil || n <= 0 {
		fail(keyContextWindow, s, "%q is not a positive whole number of tokens", s.text)
	} else {
		p.ContextWindow = n
	}

	// price reads one per-Mtok price: USD per 1e6 tokens with six decimals
	// is exactly pico-USD per token.
	price := func(key string, required bool) (Money, bool) {
		s := fields[key]
		if s == nil {
			if required {
				fail(key, s, "missing")
			}
			return 0, false
		}
		if !s.ok {
			fail(key, s, "not a number")
			return 0, false
		}
		v, err := parseDecimal(s.text, 6)
		switch {
		case errors.Is(err, errPrecision):
			fail(key, s, "%q has more than 6 decimal places (finer than 1e-6 USD per Mtok)", s.text)
		case err != nil:
			fail(key, s, "%q is not a decimal price: %v", s.text, err)
		case v < 0:
			fail(key, s, "%q is negative", s.text)
		default:
			return Money(v), true
		}
		return 0, false
	}
	p.Input, _ = price(keyInput, true)
	p.Output, _ = price(keyOutput, true)
	var ok bool
	// Without a cache-read price, reads cost the full input price: never
	// cheaper than the truth.
	if p.CachedInput, ok = price(keyCachedInput, false); !ok {
		p.CachedInput = p.Input
	}
	if p.Reasoning, ok = price(keyReasoning, false); !ok {
		p.Reasoning = p.Output
	}
	if p.CacheWrite, ok = price(keyCacheWrite, false); !ok {
		p.CacheWrite = p.Input
	}
	if len(errs) > 0 {
		return Price{}, errors.Join(errs...)
	}
	return p, nil
}

// Lookup finds a model's price: the exact name, else the longest catalog
// name that is a prefix of model followed by '-', so dated snapshots price
// as their family (gpt-4o-2024-08-06 → gpt-4o, claude-sonnet-4-5-20250929 →
// claude-sonnet-4-5). It does not allocate: it is on every call's path.
// An unknown model gives Price{} and false; the caller decides what that
// means (refuse, or forward unmetered by cost).
//
// The rule also maps variants that are not snapshots to their family
// (gpt-5-mini → gpt-5 when only gpt-5 is listed); list such variants in the
// catalog when their price differs.
func (c *Catalog) Lookup(model string) (Price, bool) {
	if c == nil {
		return Price{}, false
	}
	if p, ok := c.byName[model]; ok {
		return p, true
	}
	// Longest prefix first: walk the dashes from the right. model[:i] is a
	// substring, so the map lookup does not copy.
	for i := len(model) - 1; i > 0; i-- {
		if model[i] != '-' {
			continue
		}
		if p, ok := c.byName[model[:i]]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// Models returns the catalog's model names, sorted.
func (c *Catalog) Models() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
