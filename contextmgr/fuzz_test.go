package contextmgr

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/haltline/haltline/wire"
)

func fuzzSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/fixtures/request-*.json")
	more, _ := filepath.Glob("testdata/usage/*-*.json")
	for _, name := range append(files, more...) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for api := range 3 {
			f.Add(uint8(api+1), b, int64(50))
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, api := range apis {
		f.Add(uint8(api), genConversation(r, 6, 5000).render(api), int64(2000))
	}
	f.Add(uint8(1), []byte(`{"messages":"x"}`), int64(1))
	f.Add(uint8(3), []byte(`{"messages":[{"role":"user","content":[{"type":"tool_result"}]}]`), int64(1))
}

// FuzzRewrite: never panics, never mutates its input, and returns valid
// JSON whenever it accepted the body.
func FuzzRewrite(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, apiByte uint8, body []byte, wm int64) {
		api := wire.API(apiByte % 4)
		orig := bytes.Clone(body)
		var st State
		rw := &Rewriter{Blob: func(string) string { return "h" }, InlineLimit: 64, Head: 16, Tail: 8, DedupeMin: 8}
		out, _, err := rw.Rewrite(context.Background(), api, body, wm%100000, &st)
		if !bytes.Equal(body, orig) {
			t.Fatal("input mutated")
		}
		if err == nil && !bytes.Equal(out, body) && !json.Valid(out) {
			t.Fatalf("invalid JSON out of %q: %q", body, out)
		}
		if _, err := json.Marshal(&st); err != nil {
			t.Fatal(err)
		}
		// A second call with the state must be as safe.
		if err == nil {
			out2, _, err2 := rw.Rewrite(context.Background(), api, body, wm%100000, &st)
			if err2 == nil && !bytes.Equal(out2, body) && !json.Valid(out2) {
				t.Fatal("invalid JSON on the second call")
			}
		}
	})
}

// FuzzNeedsRewrite: never panics, and the estimate is never negative.
func FuzzNeedsRewrite(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, apiByte uint8, body []byte, wm int64) {
		api := wire.API(apiByte % 4)
		est, needs := NeedsRewrite(api, body, wm)
		if est < 0 {
			t.Fatalf("negative estimate %d", est)
		}
		// The size bound that lets NeedsRewrite skip the scan must really
		// bound the estimate, and the decision must be the scan's.
		full := Estimate(api, body)
		if full > upperBound(api, len(body)) {
			t.Fatalf("estimate %d over the bound %d for %q", full, upperBound(api, len(body)), body)
		}
		if full > classBound(api, body) {
			t.Fatalf("estimate %d over the class bound %d for %q", full, classBound(api, body), body)
		}
		if want := wm > 0 && full > wm; needs != want {
			t.Fatalf("needs %v, the full estimate %d against %d says %v", needs, full, wm, want)
		}
	})
}

// FuzzEstimateCache: after any body, the cache decides on any next body —
// one that begins with the cached prefix, most of all — as the full read.
func FuzzEstimateCache(f *testing.F) {
	f.Add(uint8(0), []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), []byte(`,{"role":"assistant","content":"yes"}]}`), int64(5))
	f.Add(uint8(1), []byte(`{"input":[{"type":"message","id":"a"}],"tools":[1]}`), []byte(`,"x"],"tools":[]}`), int64(1))
	f.Add(uint8(2), []byte(`{"messages":[]}`), []byte(`{"role":"user"}]}`), int64(3))
	f.Fuzz(func(t *testing.T, apiByte uint8, first, rest []byte, wm int64) {
		api := wire.API(apiByte % 4)
		var c EstimateCache
		c.NeedsRewrite(api, first, max(Estimate(api, first), 1)) // read whole when over the size bound
		next := rest
		if c.cut > 0 {
			next = append(first[:c.cut:c.cut], rest...)
		}
		est, needs := c.NeedsRewrite(api, next, wm)
		full := Estimate(api, next)
		if want := wm > 0 && full > wm; needs != want {
			t.Fatalf("needs %v, the full estimate %d against %d says %v", needs, full, wm, want)
		}
		if !needs && est != full && est != upperBound(api, len(next)) && est != classBound(api, next) {
			t.Fatalf("estimate %d, full %d", est, full)
		}
		if c.cut > 0 { // the body that begins with the prefix cached now
			next = append(next[:c.cut:c.cut], rest...)
		}
		if est, want := c.Estimate(api, next), Estimate(api, next); est != want {
			t.Fatalf("cached estimate %d, full read %d", est, want)
		}
	})
}

// FuzzCountClasses: the byte-class count equals its byte-by-byte
// definition, whichever loop counts.
func FuzzCountClasses(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"Où est ma commande 1234 ?"}]}`))
	f.Add(bytes.Repeat([]byte("@AZ[`az{\x00 !\x7f\x80\xff"), 9))
	f.Fuzz(func(t *testing.T, b []byte) {
		wl, wh := countClassesBytewise(b)
		if l, h := countClasses(b); l != wl || h != wh {
			t.Fatalf("countClasses = %d, %d; byte by byte %d, %d", l, h, wl, wh)
		}
		if l, h := countClassesGeneric(b); l != wl || h != wh {
			t.Fatalf("countClassesGeneric = %d, %d; byte by byte %d, %d", l, h, wl, wh)
		}
	})
}
