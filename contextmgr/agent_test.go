package contextmgr

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/gjson"
)

// listEnd returns the offset of the closing bracket of a request's item
// list: what precedes it is the part a later call must repeat.
func listEnd(api wire.API, body []byte) int {
	path := "messages"
	if api == wire.APIResponses {
		path = "input"
	}
	l := gjson.GetBytes(body, path)
	return l.Index + len(l.Raw) - 1
}

// TestSimulatedAgent drives a 40-step agent whose every tool call returns
// 30 KB against a 32k window: every forwarded body stays under 0.6 × the
// window, and between compressions each forwarded body starts with the
// previous one byte for byte (up to the new turns), so the provider's
// prompt cache keeps hitting.
func TestSimulatedAgent(t *testing.T) {
	t.Parallel()
	const window = 32000
	wm := Watermark(window, Params{})
	if wm != 19200 {
		t.Fatalf("watermark %d, want 0.6 × 32000", wm)
	}
	for _, api := range apis {
		if raceOn && api != wire.APIChat {
			continue // the same code path; the race detector makes it slow
		}
		t.Run(api.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(11, uint64(api)))
			g := genConv{
				system: "You are an SRE agent. Work step by step.",
				task:   "Find why checkout is slow. You must not restart production pods.",
			}
			sink, store := blobSink()
			rw := &Rewriter{Blob: sink}
			var st State
			var prev []byte
			var prevRewritten bool
			compressions, stable, untouched := 0, 0, 0
			for step := 1; step <= 40; step++ {
				s := genStep{text: sentence(r, 12), calls: []genCall{{
					id: fmt.Sprintf("call_%02d", step), name: "query_logs",
					args: fmt.Sprintf(`{"q":"step %d"}`, step), result: toolOutput(r, 30<<10),
				}}}
				if step%10 == 0 {
					s.followUp = "Keep going. Never page the on-call engineer."
				}
				g.steps = append(g.steps, s)
				body := g.render(api)
				out, rep, err := rw.Rewrite(context.Background(), api, body, wm, &st)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				est := Estimate(api, out)
				if est > wm {
					t.Fatalf("step %d: forwarded estimate %d over the watermark %d (report %+v)", step, est, wm, rep)
				}
				if err := validate(api, out); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				switch {
				case !rep.Rewritten:
					untouched++
				case rep.Compressed:
					compressions++
				case prevRewritten:
					// Between compressions: the previous forwarded request,
					// up to the end of its history, is a byte prefix of this
					// one.
					if end := listEnd(api, prev); !bytes.HasPrefix(out, prev[:end]) {
						t.Fatalf("step %d: prefix changed without a compression", step)
					}
					stable++
				}
				prev, prevRewritten = out, rep.Rewritten
			}
			t.Logf("%s: %d untouched, %d compressions, %d calls reused the cached prefix; %d blobs; last %d tokens of %d", api, untouched, compressions, stable, len(store), Estimate(api, prev), wm)
			if compressions == 0 || compressions > 8 || stable < 25 {
				t.Fatalf("compressions %d, stable calls %d: compress hard and rarely", compressions, stable)
			}
			if len(st.Facts) == 0 {
				t.Fatal("the follow-up's requirement was not pinned")
			}
		})
	}
}
