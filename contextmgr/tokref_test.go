package contextmgr

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
)

// tokrefSample is one entry of testdata/tokref/tokref.json (gen.mjs): the
// content of one user message, or tool definitions offered with the user
// message "Go.", and the prompt tokens o200k_base gives that request.
type tokrefSample struct {
	Class         string            `json:"class"`
	Text          string            `json:"text"`
	Tools         []json.RawMessage `json:"tools"`
	RequestTokens int64             `json:"request_tokens"`
}

// tokrefBody is the request of a sample in the format of api.
func tokrefBody(t *testing.T, api wire.API, s tokrefSample) []byte {
	t.Helper()
	text := s.Text
	if s.Class == "tools" {
		text = "Go."
	}
	content, err := json.Marshal(text)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	switch api {
	case wire.APIResponses:
		fmt.Fprintf(&b, `{"model":"gpt-4o","input":[{"role":"user","content":%s}]`, content)
	default:
		fmt.Fprintf(&b, `{"model":"gpt-4o","messages":[{"role":"user","content":%s}]`, content)
	}
	if len(s.Tools) > 0 {
		b.WriteString(`,"tools":[`)
		for i, raw := range s.Tools {
			if i > 0 {
				b.WriteByte(',')
			}
			if api == wire.APIResponses { // the function's members at the top
				var def struct {
					Function map[string]json.RawMessage `json:"function"`
				}
				if err := json.Unmarshal(raw, &def); err != nil {
					t.Fatal(err)
				}
				def.Function["type"] = json.RawMessage(`"function"`)
				if raw, err = json.Marshal(def.Function); err != nil {
					t.Fatal(err)
				}
			}
			b.Write(raw)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// Estimator error bounds, per sample: the estimate may be this far below
// the tokenizer's count (the reservation's 10% margin in accounting covers
// the rest of the low side), and never half again above it.
const (
	maxLowError  = -0.20
	maxHighError = 0.50
)

// TestEstimatorError measures the estimator against o200k_base counts of a
// corpus per content class (testdata/tokref, generated once by gen.mjs with
// the npm package gpt-tokenizer) and against the providers' own counts on
// the recorded pairs (testdata/usage), and prints the error per class:
//
//	go test ./contextmgr -run TestEstimatorError -v
//
// It fails when any sample is estimated more than 20% low or 50% high.
func TestEstimatorError(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/tokref/tokref.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Tokenizer string         `json:"tokenizer"`
		Samples   []tokrefSample `json:"samples"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	type row struct {
		class, api, against string
		errs                []float64
	}
	var rows []*row
	add := func(class, api, against string, est, real int64) {
		var r *row
		if i := slices.IndexFunc(rows, func(r *row) bool { return r.class == class && r.api == api }); i >= 0 {
			r = rows[i]
		} else {
			r = &row{class: class, api: api, against: against}
			rows = append(rows, r)
		}
		e := float64(est-real) / float64(real)
		r.errs = append(r.errs, e)
		if e < maxLowError || e > maxHighError {
			t.Errorf("%s, %s: estimate %d against %d (%s): error %+.1f%% outside %+.0f%%..%+.0f%%",
				class, api, est, real, against, 100*e, 100*maxLowError, 100*maxHighError)
		}
	}
	for _, s := range ref.Samples {
		for _, api := range []wire.API{wire.APIChat, wire.APIResponses} {
			add(s.Class, api.String(), "o200k", Estimate(api, tokrefBody(t, api, s)), s.RequestTokens)
		}
	}
	for _, c := range recordedUsage(t) {
		body, err := os.ReadFile(filepath.Join("testdata/usage", c.File))
		if err != nil {
			t.Fatal(err)
		}
		api := apiOf(c.API)
		add("recorded", api.String(), "provider", Estimate(api, body), c.InputTokens)
	}
	if len(rows) < 6 {
		t.Fatalf("%d rows: the corpus or the recorded pairs are missing", len(rows))
	}
	t.Logf("estimator error against %s and the providers' recorded counts (+ is high)", ref.Tokenizer)
	t.Logf("%-9s %-18s %-8s %3s %8s %8s %8s %8s", "class", "api", "against", "n", "median", "p95|err|", "lowest", "highest")
	for _, r := range rows {
		slices.Sort(r.errs)
		abs := make([]float64, len(r.errs))
		for i, e := range r.errs {
			abs[i] = math.Abs(e)
		}
		slices.Sort(abs)
		t.Logf("%-9s %-18s %-8s %3d %+7.1f%% %7.1f%% %+7.1f%% %+7.1f%%", r.class, r.api, r.against, len(r.errs),
			100*quantile(r.errs, 0.5), 100*quantile(abs, 0.95), 100*r.errs[0], 100*r.errs[len(r.errs)-1])
	}
}

// quantile is the nearest-rank quantile q of sorted xs.
func quantile(xs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(i, 0)]
}
