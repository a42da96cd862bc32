package contextmgr

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/haltline/haltline/wire"
)

type usageCase struct {
	File        string `json:"file"`
	API         string `json:"api"`
	Model       string `json:"model"`
	InputTokens int64  `json:"input_tokens"`
	Source      string `json:"source"`
}

func apiOf(s string) wire.API {
	switch s {
	case "chat":
		return wire.APIChat
	case "responses":
		return wire.APIResponses
	case "messages":
		return wire.APIMessages
	}
	return wire.APIUnknown
}

// TestEstimateAgainstRecordedUsage measures the estimator against the
// providers' own input_tokens on recorded request/response pairs; the
// bound is the error doc.go states.
func TestEstimateAgainstRecordedUsage(t *testing.T) {
	t.Parallel()
	cases := recordedUsage(t)
	var sumAbs float64
	for _, c := range cases {
		body, err := os.ReadFile(filepath.Join("testdata/usage", c.File))
		if err != nil {
			t.Fatal(err)
		}
		est := Estimate(apiOf(c.API), body)
		rel := float64(est-c.InputTokens) / float64(c.InputTokens)
		sumAbs += math.Abs(rel)
		t.Logf("%-28s %-9s real %4d est %4d err %+5.1f%%", c.File, c.API, c.InputTokens, est, 100*rel)
		if math.Abs(rel) > 0.15 {
			t.Errorf("%s: estimate %d vs real %d: error %+.1f%% over the documented ±15%%", c.File, est, c.InputTokens, 100*rel)
		}
	}
	t.Logf("mean absolute error %.1f%% over %d recorded calls", 100*sumAbs/float64(len(cases)), len(cases))
}

// recordedUsage is the recorded pairs of testdata/usage.
func recordedUsage(t *testing.T) []usageCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/usage/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []usageCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// The size and class bounds hold on the heaviest shapes the estimator
// prices, and a body that stops inside a string.
func TestUpperBoundHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc string
		body string
	}{
		{"empty ids", `{"id":"","id":"","ids":["","",""],"call_id":""}`},
		{"id array", `{"id":["","","","","","","",""]}`},
		{"two-byte text", `{"t":"éééééééééé"}`},
		{"escapes", `{"t":"\u00e9\u00e9\n\t\""}`},
		{"digits", `[1234567890,1234567890]`},
		{"punctuation", `{"t":"!!!!####$$$$%%%%"}`},
		{"open id", `{"id":"`},
		{"open value", `{"content":"`},
		{"quotes", `["","","","","","","","","","",""]`},
		{"letters outside strings", `[true,false,null,true,false,null]`},
		{"escaped newlines", `{"t":"\n\n\\n\n\t\n"}`},
		{"newline across words", `{"content":"abcdefg\nabcdefg\n\n\n\n\n\n\n\n"}`},
		{"continuation bytes", "{\"t\":\"\x80\x80\x80\xbf\xbf\"}"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			for _, api := range []wire.API{wire.APIChat, wire.APIResponses, wire.APIMessages} {
				est := Estimate(api, []byte(tc.body))
				if bound := upperBound(api, len(tc.body)); est > bound {
					t.Fatalf("%v: estimate %d over the bound %d", api, est, bound)
				}
				if bound := classBound(api, []byte(tc.body)); est > bound {
					t.Fatalf("%v: estimate %d over the class bound %d", api, est, bound)
				}
			}
		})
	}
}

// The class bound holds on every step of generated agent conversations
// (prose, JSON tool output, ids, escapes), counts each class as the byte
// loop does whatever the alignment, and is tight enough on prose to
// decide a 200 KB request to a 128k-window model without weighing it.
func TestClassBound(t *testing.T) {
	t.Parallel()
	for _, api := range apis {
		for seed := uint64(1); seed <= 10; seed++ {
			r := rand.New(rand.NewPCG(seed, 11))
			g := genConversation(r, 10, 3000)
			for k := 0; k <= len(g.steps); k++ {
				body := genConv{system: g.system, task: g.task, steps: g.steps[:k]}.render(api)
				if est, bound := Estimate(api, body), classBound(api, body); est > bound {
					t.Fatalf("%v seed %d step %d: estimate %d over the class bound %d", api, seed, k, est, bound)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 3))
	b := make([]byte, 300)
	for range 2000 {
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		n := r.IntN(len(b))
		// Random lengths put each byte position in the word loop and in
		// the tail's byte loop: both must count as the definition does.
		if got, want := classBound(wire.APIChat, b[:n]), classBoundBytewise(b[:n]); got != want {
			t.Fatalf("classBound %d, byte by byte %d for %q", got, want, b[:n])
		}
	}
	prose := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"` +
		strings.Repeat("You are the order desk assistant of a mail-order shop. Answer from tool results only, cite order numbers. ", 1900) +
		`"},{"role":"user","content":"Where is order 1234?"}]}`)
	wm := Watermark(128_000, Params{})
	if bound := classBound(wire.APIChat, prose); bound > wm {
		t.Fatalf("%d bytes of prose: class bound %d over the watermark %d", len(prose), bound, wm)
	}
	if upperBound(wire.APIChat, len(prose)) <= wm {
		t.Fatalf("the size bound alone decides %d bytes: the case does not test the class bound", len(prose))
	}
}

// classBoundBytewise is classBound's definition, one byte at a time.
func classBoundBytewise(b []byte) int64 {
	var w int64
	for _, c := range b {
		switch {
		case c >= 0x80:
			w += highClassWeight
		case c <= ' ', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			w += lowClassWeight
		default:
			w += midClassWeight
		}
	}
	return finish(wire.APIChat, w+idWeight, true)
}

// The cache decides as the full read does, on every step of growing agent
// conversations, in the three formats, and its Estimate is the full read's;
// it reads less once the history repeats; and a body that does not begin
// with the cached prefix (the model changed, the history was edited) is
// read whole, correctly.
func TestEstimateCacheDecidesAsTheFullRead(t *testing.T) {
	for _, api := range apis {
		for seed := uint64(1); seed <= 20; seed++ {
			r := rand.New(rand.NewPCG(seed, 7))
			g := genConversation(r, 12, 3000)
			var c, ce EstimateCache // ce: Estimate's, read to the end every time
			for k := 0; k <= len(g.steps); k++ {
				step := genConv{system: g.system, task: g.task, steps: g.steps[:k]}
				body := step.render(api)
				if k%5 == 4 { // an edited history: the prefix no longer matches
					body = bytes.Replace(body, []byte(g.task[:20]), []byte(strings.ToUpper(g.task[:20])), 1)
				}
				full := Estimate(api, body)
				if est := ce.Estimate(api, body); est != full || ce.cut <= 0 {
					t.Fatalf("%v seed %d step %d: cached estimate %d, full read %d (cached prefix %d)", api, seed, k, est, full, ce.cut)
				}
				for _, wm := range []int64{full - 1, full, full + 1, full / 2} {
					cc := c // each watermark from the same cache
					est, needs := cc.NeedsRewrite(api, body, wm)
					_, want := NeedsRewrite(api, body, wm)
					if needs != want {
						t.Fatalf("%v seed %d step %d wm %d: cached says %v, full read %v", api, seed, k, wm, needs, want)
					}
					if !needs && est != full && est != upperBound(api, len(body)) && est != classBound(api, body) {
						t.Fatalf("%v seed %d step %d: estimate %d, full %d", api, seed, k, est, full)
					}
				}
				est, _ := c.NeedsRewrite(api, body, full) // fits: read to the end, cache updated
				if est != full && est != upperBound(api, len(body)) && est != classBound(api, body) {
					t.Fatalf("%v seed %d step %d: estimate %d, full %d", api, seed, k, est, full)
				}
				if c.cut <= 0 && classBound(api, body) > full {
					t.Fatalf("%v seed %d step %d: nothing cached", api, seed, k)
				}
			}
		}
	}
}

// Hashing the prefix in two writes gives the hash of one: the cache checks
// in one write what it stored in two.
func TestEstimateCacheHashIsSplitInvariant(t *testing.T) {
	b := bytes.Repeat([]byte("0123456789abcdef"), 10_000)
	for _, cut := range []int{0, 1, 63, 64, 65, 1023, 1024, 1025, 70_000} {
		var one, two xxh3.Hasher
		_, _ = one.Write(b)
		_, _ = two.Write(b[:cut])
		_ = two.Sum64()
		_, _ = two.Write(b[cut:])
		if one.Sum64() != two.Sum64() {
			t.Fatalf("cut %d: hashes differ", cut)
		}
	}
}

// countClassesBytewise is the byte classes' definition, one byte at a time.
func countClassesBytewise(b []byte) (low, high int) {
	for _, c := range b {
		switch {
		case c >= 0x80:
			high++
		case c <= ' ', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			low++
		}
	}
	return low, high
}

// Both counts — the word loop and the vector one, which this machine may
// run — count as the definition does: every byte value, at every offset
// and length around the 32-byte steps, and random bodies.
func TestCountClasses(t *testing.T) {
	check := func(b []byte) {
		t.Helper()
		wl, wh := countClassesBytewise(b)
		if l, h := countClasses(b); l != wl || h != wh {
			t.Fatalf("countClasses = %d, %d; byte by byte %d, %d for %q", l, h, wl, wh, b)
		}
		if l, h := countClassesGeneric(b); l != wl || h != wh {
			t.Fatalf("countClassesGeneric = %d, %d; byte by byte %d, %d for %q", l, h, wl, wh, b)
		}
	}
	all := make([]byte, 0, 4*256)
	for range 4 {
		for c := range 256 {
			all = append(all, byte(c))
		}
	}
	for off := range 33 {
		for n := 0; off+n <= len(all); n += 7 {
			check(all[off : off+n])
		}
	}
	// Long bodies of one class, and random ones, around the vector
	// count's rounds of 255 steps of 32 bytes, after which its byte
	// lanes would overflow.
	for _, n := range []int{255 * 32, 255*32 + 32, 256 * 32, 3*255*32 + 17, 200 << 10} {
		for _, c := range []byte{'a', 0x80, '{'} {
			check(bytes.Repeat([]byte{c}, n))
		}
		long := make([]byte, n)
		for i := range long {
			long[i] = all[(i*7+i/13)%len(all)]
		}
		check(long)
	}
	r := rand.New(rand.NewPCG(5, 5))
	b := make([]byte, 5000)
	for range 500 {
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		off := r.IntN(40)
		check(b[off : off+r.IntN(len(b)-off)])
	}
	t.Logf("vector count on this machine: %v", hasVectorClassCount())
}
