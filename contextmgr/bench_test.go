package contextmgr

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
)

// conversation200K returns a generated conversation of about 200 KB in the
// API's format.
func conversation200K(api wire.API) []byte {
	r := rand.New(rand.NewPCG(42, 42))
	for steps := 10; ; steps += 2 {
		r = rand.New(rand.NewPCG(42, 42))
		body := genConversation(r, steps, 6000).render(api)
		if len(body) >= 200<<10 {
			return body
		}
	}
}

// BenchmarkNeedsRewrite is the decision on every call for a 200 KB body:
// against a 32k-window model (the body is read until it is over), against
// a watermark the body just fits (the whole body is read: the cost of a
// call that needs no rewrite) and against a 1M-window model (0.6 × 1M: the
// size alone decides).
func BenchmarkNeedsRewrite(b *testing.B) {
	for _, api := range apis {
		body := conversation200K(api)
		for _, w := range []struct {
			name string
			wm   int64
		}{{"window=32k", 19_200}, {"fits", Estimate(api, body)}, {"window=128k", Watermark(128_000, Params{})}, {"window=1M", 600_000}} {
			b.Run(api.String()+"/"+w.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					NeedsRewrite(api, body, w.wm)
				}
			})
		}
	}
}

// BenchmarkRewrite measures a full rewrite with a compression (a fresh
// state each time: the worst case) and a rewrite that reuses the run's
// compressed prefix (the common case once a run is over the watermark).
func BenchmarkRewrite(b *testing.B) {
	for _, api := range apis {
		body := conversation200K(api)
		wm := Estimate(api, body) / 3
		b.Run(api.String()+"/compress", func(b *testing.B) {
			rw := &Rewriter{Blob: func(string) string { return "h" }}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var st State
				if _, _, err := rw.Rewrite(context.Background(), api, body, wm, &st); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(api.String()+"/reuse", func(b *testing.B) {
			rw := &Rewriter{Blob: func(string) string { return "h" }}
			var st State
			if _, _, err := rw.Rewrite(context.Background(), api, body, wm, &st); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, rep, err := rw.Rewrite(context.Background(), api, body, wm, &st); err != nil || !rep.Reused {
					b.Fatal(err, rep.Reused)
				}
			}
		})
	}
}

// BenchmarkNeedsRewriteNextStep is the decision on a run's next call: the
// 200 KB history of the last call plus one step, with the run's cache of
// the last call (the whole body is read when the cache misses).
func BenchmarkNeedsRewriteNextStep(b *testing.B) {
	for _, api := range apis {
		var prev, next []byte
		for steps := 10; ; steps += 2 {
			g := genConversation(rand.New(rand.NewPCG(42, 42)), steps+1, 6000)
			next = g.render(api)
			g.steps = g.steps[:steps]
			prev = g.render(api)
			if len(prev) >= 200<<10 {
				break
			}
		}
		wm := Estimate(api, next)
		var primed EstimateCache
		primed.NeedsRewrite(api, prev, wm)
		b.Run(api.String(), func(b *testing.B) {
			b.SetBytes(int64(len(next)))
			b.ReportAllocs()
			for b.Loop() {
				c := primed
				if _, needs := c.NeedsRewrite(api, next, wm); needs {
					b.Fatal("over the watermark")
				}
			}
		})
	}
}

// BenchmarkClassBound measures the byte-class count that decides a large
// body of prose without weighing it (the harness's 200 KB request to a
// 128k-window model), against weighing it.
func BenchmarkClassBound(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"` +
		strings.Repeat("You are the order desk assistant of a mail-order shop. Answer from tool results only, cite order numbers. ", 1900) +
		`"},{"role":"user","content":"Where is order 1234?"}]}`)
	wm := Watermark(128_000, Params{})
	b.Run("decide", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, needs := NeedsRewrite(wire.APIChat, body, wm); needs {
				b.Fatal("over the watermark")
			}
		}
	})
	b.Run("weigh", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			Estimate(wire.APIChat, body)
		}
	})
}
