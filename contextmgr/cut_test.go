package contextmgr

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/gjson"
)

// Cut cuts every tool output over the inline limit in each API's request,
// whatever the request's size, and nothing else; the same output is cut
// into the same bytes on the next call (one handle), so the forwarded
// prefix stays byte-identical; a tool kept whole (Keep) is not cut; a
// request with nothing to cut comes back as the same slice.
func TestCutEveryLongToolOutput(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("2026-12-06 03:00:17 checkout error: upstream timeout after 30s\n", 3200) // 204,800 characters
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(1, uint64(api)))
			g := genConversation(r, 3, 200)
			g.steps[0].calls = []genCall{{id: "call_big", name: "read_logs", args: `{"day":"2026-12-05"}`, result: long}}
			sink, kept := blobSink()
			rw := &Rewriter{Blob: sink}
			var st State
			first := g.render(api)
			out, rep, err := rw.Cut(api, first, &st)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(api, out); err != nil {
				t.Fatalf("cut request invalid: %v", err)
			}
			if rep.Cut != 1 || len(rep.NewCuts) != 1 || rep.NewCuts[0].Tool != "read_logs" || rep.NewCuts[0].Chars != len(long) ||
				kept[rep.NewCuts[0].Handle] != long {
				t.Fatalf("report %+v, kept %d blobs", rep, len(kept))
			}
			if len(out) > len(first)-len(long)+DefaultHead+DefaultTail+400 || !bytes.Contains(out, []byte("handle "+rep.NewCuts[0].Handle)) {
				t.Fatalf("forwarded %d bytes of %d, handle named: %v", len(out), len(first), bytes.Contains(out, []byte(rep.NewCuts[0].Handle)))
			}
			// Nothing but the output changed: the request without it is the same.
			if Estimate(api, out) >= Estimate(api, first)/10 || gjson.GetBytes(out, "model").Str != gjson.GetBytes(first, "model").Str {
				t.Fatalf("estimate %d of %d", Estimate(api, out), Estimate(api, first))
			}

			// The next call carries the same history and one more step.
			g.steps = append(g.steps, genStep{calls: []genCall{{id: "call_next", name: "get_metrics", args: `{}`, result: "p99 4.2s"}}})
			second := g.render(api)
			out2, rep2, err := rw.Cut(api, second, &st)
			if err != nil {
				t.Fatal(err)
			}
			if rep2.Cut != 1 || len(rep2.NewCuts) != 0 || len(kept) != 1 {
				t.Fatalf("second call: %+v, %d blobs", rep2, len(kept))
			}
			if p := commonPrefix(out, out2); p < listEnd(api, out)-200 {
				t.Fatalf("forwarded prefix changed at byte %d of %d", p, len(out))
			}

			// Kept whole by policy.
			whole := &Rewriter{Blob: sink, Keep: func(tool string) bool { return tool == "read_logs" }}
			if out, rep, _ := whole.Cut(api, first, &State{}); !bytes.Equal(out, first) || rep.Cut != 0 {
				t.Fatalf("read_logs kept whole: cut %d", rep.Cut)
			}
			// Nothing to cut: the same slice, unread.
			g.steps[0].calls[0].result = "short"
			small := g.render(api)
			if out, _, _ := rw.Cut(api, small, &st); &out[0] != &small[0] || len(out) != len(small) {
				t.Fatal("a request with nothing to cut was copied")
			}
		})
	}
}

func BenchmarkCut(b *testing.B) {
	long := strings.Repeat("2026-12-06 03:00:17 checkout error: upstream timeout after 30s\n", 3200)
	r := rand.New(rand.NewPCG(1, 1))
	small := genConversation(r, 1, 200).render(wire.APIChat)
	g := genConversation(r, 6, 300)
	nothing := g.render(wire.APIChat)
	g.steps[0].calls = []genCall{{id: "call_big", name: "read_logs", args: `{}`, result: long}}
	big := g.render(wire.APIChat)
	sink, _ := blobSink()
	rw := &Rewriter{Blob: sink}
	for _, tc := range []struct {
		name string
		body []byte
	}{{"200KB-output", big}, {"nothing-to-cut", nothing}, {"small-request", small}} {
		b.Run(tc.name, func(b *testing.B) {
			var st State
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := rw.Cut(wire.APIChat, tc.body, &st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMayCut(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	body := genConversation(r, 6, 300).render(wire.APIChat)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if MayCut(body, 0) {
			b.Fatal("long string found")
		}
	}
}

// A long request without a tool output (a pasted document, a long prompt)
// has nothing to cut and is not read; one with a long output of each kind
// may, whatever way the JSON writes its markers.
func TestMayCutLooksForToolOutputs(t *testing.T) {
	t.Parallel()
	doc := strings.Repeat("a quoted <tag> & café paragraph of a pasted document. ", 200)
	long := strings.Repeat("log line of a tool's output\n", 400)
	for name, tc := range map[string]struct {
		body string
		want bool
	}{
		"prompt":             {`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"` + doc + `"}]}`, false},
		"prompt, escaped":    {`{"model":"m","messages":[{"role":"user","content":"` + strings.ReplaceAll(doc, "<", `\u003c`) + `"}]}`, false},
		"chat tool":          {`{"messages":[{"role":"tool","tool_call_id":"c","content":"` + long + `"}]}`, true},
		"chat tool, spaced":  {`{"messages": [{"role" : "tool", "content": "` + long + `"}]}`, true},
		"chat function role": {`{"messages":[{"role" :  "function","name":"f","content":"` + long + `"}]}`, true},
		"responses output":   {`{"input":[{"type":"function_call_output","call_id":"c","output":"` + long + `"}]}`, true},
		"anthropic result":   {`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"` + long + `"}]}]}`, true},
		"escaped marker":     {`{"messages":[{"role":"t\u006fol","content":"` + long + `"}]}`, true},
	} {
		if got := MayCut([]byte(tc.body), 0); got != tc.want {
			t.Errorf("%s: MayCut = %v, want %v", name, got, tc.want)
		}
	}
}
