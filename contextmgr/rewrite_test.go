package contextmgr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/tidwall/gjson"
)

var apis = []wire.API{wire.APIChat, wire.APIResponses, wire.APIMessages}

func blobSink() (func(string) string, map[string]string) {
	store := map[string]string{}
	return func(text string) string {
		h := fmt.Sprintf("b%03d", len(store)+1)
		store[h] = text
		return h
	}, store
}

// TestRewriteProperties rewrites many generated conversations in each
// format under random watermarks and checks that the result is valid for
// the provider, under the watermark, and keeps the system prompt, the task,
// the pinned facts and the last K turns.
func TestRewriteProperties(t *testing.T) {
	t.Parallel()
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			t.Parallel()
			seeds := uint64(150)
			if raceOn {
				seeds = 10
			}
			for seed := uint64(0); seed < seeds; seed++ {
				r := rand.New(rand.NewPCG(seed, uint64(api)))
				g := genConversation(r, 4+r.IntN(30), 12000)
				body := g.render(api)
				orig := bytes.Clone(body)
				if err := validate(api, body); err != nil {
					t.Fatalf("seed %d: generated request invalid: %v", seed, err)
				}
				before := Estimate(api, body)
				wm := int64(12000) + r.Int64N(max(before, 12001)-11999)
				sink, _ := blobSink()
				rw := &Rewriter{Blob: sink}
				var st State
				out, rep, err := rw.Rewrite(context.Background(), api, body, wm, &st)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if !bytes.Equal(body, orig) {
					t.Fatalf("seed %d: input mutated", seed)
				}
				if err := validate(api, out); err != nil {
					t.Fatalf("seed %d (wm %d): rewritten request invalid: %v", seed, wm, err)
				}
				// A body that fits the size bound is not read: the report
				// gives the bound.
				reported := Estimate(api, out)
				if &out[0] == &body[0] && rep.TokensAfter == upperBound(api, len(body)) {
					reported = rep.TokensAfter
				}
				if est := Estimate(api, out); est > wm || rep.Over || rep.TokensAfter != reported {
					t.Fatalf("seed %d: estimate %d (report %d, over %v) above watermark %d", seed, est, rep.TokensAfter, rep.Over, wm)
				}
				checkKept(t, seed, api, g, out, &st, rw.keepTurns())
			}
		})
	}
}

// checkKept asserts the rewrite kept what it must.
func checkKept(t *testing.T, seed uint64, api wire.API, g genConv, out []byte, st *State, k int) {
	t.Helper()
	system := gjson.GetBytes(out, "messages.0.content").String()
	switch api {
	case wire.APIResponses:
		system = gjson.GetBytes(out, "instructions").String()
	case wire.APIMessages:
		system = gjson.GetBytes(out, "system").String()
	}
	if !strings.HasPrefix(system, g.system) {
		t.Fatalf("seed %d: system prompt lost: %.80q", seed, system)
	}
	for _, f := range st.Facts {
		if !strings.Contains(system, f.Value) {
			t.Fatalf("seed %d: pinned fact %q not in the system segment", seed, f.Value)
		}
	}
	if !bytes.Contains(out, []byte(mustJSON(g.task))) {
		t.Fatalf("seed %d: task lost", seed)
	}
	// The last K turns of the original: their call ids and texts are there.
	turnsKept := 0
	for i := len(g.steps) - 1; i >= 0 && turnsKept < k; i-- {
		s := g.steps[i]
		// A step is one model turn, plus a later user turn when it has a
		// follow-up of its own (for Anthropic a follow-up rides with the
		// tool results when there are any).
		if s.followUp != "" && (api != wire.APIMessages || len(s.calls) == 0) {
			turnsKept++
			if turnsKept >= k {
				break
			}
		}
		for _, c := range s.calls {
			if !bytes.Contains(out, []byte(`"`+c.id+`"`)) {
				t.Fatalf("seed %d: call %s of step %d (last %d turns) dropped", seed, c.id, i, k)
			}
		}
		if s.text != "" && !bytes.Contains(out, []byte(mustJSON(s.text))) {
			t.Fatalf("seed %d: text of step %d dropped", seed, i)
		}
		turnsKept++
	}
}

func TestUnderWatermarkReturnsSameSlice(t *testing.T) {
	t.Parallel()
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(7, 7))
			body := genConversation(r, 6, 3000).render(api)
			rw := &Rewriter{}
			var st State
			out, rep, err := rw.Rewrite(context.Background(), api, body, Estimate(api, body), &st)
			if err != nil {
				t.Fatal(err)
			}
			if &out[0] != &body[0] || len(out) != len(body) || rep.Rewritten {
				t.Fatal("a request under the watermark must come back as the same slice")
			}
		})
	}
}

func TestRewriteSteps(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("line of tool output with some words in it\n", 200) // ~8.6 KB
	tests := []struct {
		desc  string
		api   wire.API
		body  string
		check func(t *testing.T, out []byte, rep Report, st *State)
	}{
		{
			desc: "chat: a long tool result is cut to head + tail with a handle",
			api:  wire.APIChat,
			body: `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"task"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":` + mustJSON(long) + `}]}`,
			check: func(t *testing.T, out []byte, rep Report, st *State) {
				got := gjson.GetBytes(out, "messages.3.content").String()
				if rep.Cut != 1 || !strings.Contains(got, "handle b001") || len(got) > 2200 {
					t.Fatalf("cut %d, content %d bytes: %.200q", rep.Cut, len(got), got)
				}
				if !strings.HasPrefix(got, long[:1500]) || !strings.HasSuffix(got, long[len(long)-500:]) {
					t.Fatal("head or tail not kept")
				}
				if st.Blobs[textKey(long)] != "b001" || rep.Dropped != 0 {
					t.Fatalf("state %+v report %+v", st, rep)
				}
			},
		},
		{
			desc: "anthropic: a repeated result refers to the first",
			api:  wire.APIMessages,
			body: `{"system":"sys","messages":[{"role":"user","content":"task"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":` + mustJSON(long) + `}]},{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":` + mustJSON(long) + `}]}]}`,
			check: func(t *testing.T, out []byte, rep Report, st *State) {
				if got := gjson.GetBytes(out, "messages.4.content.0.content").String(); got != "[same result as call t1]" || rep.Deduped != 1 {
					t.Fatalf("deduped %d: %q", rep.Deduped, got)
				}
			},
		},
		{
			desc: "responses: previous_response_id forbids dropping but still cuts",
			api:  wire.APIResponses,
			body: `{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c1","output":` + mustJSON(long) + `}]}`,
			check: func(t *testing.T, out []byte, rep Report, st *State) {
				if rep.Cut != 1 || rep.Dropped != 0 || !gjson.GetBytes(out, "input.0.call_id").Exists() {
					t.Fatalf("report %+v", rep)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			sink, _ := blobSink()
			rw := &Rewriter{Blob: sink}
			var st State
			out, rep, err := rw.Rewrite(context.Background(), tc.api, []byte(tc.body), 1500, &st)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(tc.api, out); err != nil {
				t.Fatal(err)
			}
			tc.check(t, out, rep, &st)
		})
	}
}

// TestSummariser checks the callback path: its summary and facts land in
// the system segment, a later compression never overwrites a pinned fact,
// and an error falls back to the extractive summary.
func TestSummariser(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 3))
	g := genConversation(r, 30, 6000)
	calls := 0
	rw := &Rewriter{Summarise: func(_ context.Context, prev string, dropped []Turn) (string, map[string]string, error) {
		calls++
		if len(dropped) == 0 {
			t.Error("summariser called with nothing dropped")
		}
		return fmt.Sprintf("summary %d of %d turns", calls, len(dropped)), map[string]string{"db": fmt.Sprintf("postgres %d", calls)}, nil
	}}
	var st State
	out, rep, err := rw.Rewrite(context.Background(), wire.APIChat, g.render(wire.APIChat), 8000, &st)
	if err != nil {
		t.Fatal(err)
	}
	sys := gjson.GetBytes(out, "messages.0.content").String()
	if rep.SummaryBy != "summariser" || !strings.Contains(sys, "summary 1 of") || !strings.Contains(sys, "db: postgres 1") {
		t.Fatalf("report %+v, system %q", rep, sys)
	}
	// Tighter: a second compression; the fact keeps its first value.
	out, rep, err = rw.Rewrite(context.Background(), wire.APIChat, g.render(wire.APIChat), 3000, &st)
	if err != nil {
		t.Fatal(err)
	}
	sys = gjson.GetBytes(out, "messages.0.content").String()
	if !rep.Compressed || !strings.Contains(sys, "summary 2 of") || !strings.Contains(sys, "db: postgres 1") || strings.Contains(sys, "postgres 2") {
		t.Fatalf("report %+v, system %q", rep, sys)
	}

	failing := &Rewriter{Summarise: func(context.Context, string, []Turn) (string, map[string]string, error) {
		return "", nil, errors.New("model down")
	}}
	var st2 State
	out, rep, err = failing.Rewrite(context.Background(), wire.APIChat, g.render(wire.APIChat), 8000, &st2)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SummaryBy != "extractive" || rep.SummaryError != "model down" || !strings.Contains(gjson.GetBytes(out, "messages.0.content").String(), "- Called ") {
		t.Fatalf("report %+v", rep)
	}
}

func TestStateJSONRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 5))
	g := genConversation(r, 30, 8000)
	sink, _ := blobSink()
	rw := &Rewriter{Blob: sink}
	var st State
	body := g.render(wire.APIMessages)
	out1, _, err := rw.Rewrite(context.Background(), wire.APIMessages, body, 9000, &st)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var restored State
	if err := json.Unmarshal(raw, &restored); err != nil {
		t.Fatal(err)
	}
	out2, rep, err := rw.Rewrite(context.Background(), wire.APIMessages, body, 9000, &restored)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out1, out2) || !rep.Reused || rep.Compressed || len(rep.Blobs) != 0 {
		t.Fatalf("a restored state must reproduce the request byte for byte (reused %v, compressed %v, new blobs %v)", rep.Reused, rep.Compressed, rep.Blobs)
	}
}

func TestExtractFacts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		text string
		want int
	}{
		{desc: "requirement words", text: "You must use Go.\nNever touch prod.\nDo not email the user.\nThe report is required by Friday.", want: 4},
		{desc: "whole words only", text: "Pass the mustard.\nThe always-on flag.", want: 0},
		{desc: "plain prose", text: "Let us look at the logs.", want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got := extractFacts([]Turn{{Role: "user", UserText: tc.text}})
			if len(got) != tc.want {
				t.Fatalf("got %d facts %+v, want %d", len(got), got, tc.want)
			}
		})
	}
}

// TestRewriteConcurrent rewrites different conversations at once: the
// readings are pooled, so a request must not see another's bytes, and
// what it returns (body, state) must not alias memory a later request
// reuses.
func TestRewriteConcurrent(t *testing.T) {
	t.Parallel()
	type job struct {
		api  wire.API
		body []byte
		wm   int64
		out  []byte
		st   string
	}
	var jobs []*job
	for i := range 12 {
		api := apis[i%len(apis)]
		r := rand.New(rand.NewPCG(uint64(i), 17))
		body := genConversation(r, 8+r.IntN(12), 9000).render(api)
		jobs = append(jobs, &job{api: api, body: body, wm: Estimate(api, body) / 3})
	}
	run := func(j *job) ([]byte, string) {
		rw := &Rewriter{Blob: func(string) string { return "h" }}
		var st State
		out, _, err := rw.Rewrite(context.Background(), j.api, j.body, j.wm, &st)
		if err != nil {
			t.Error(err)
		}
		raw, _ := json.Marshal(&st)
		return out, string(raw)
	}
	for _, j := range jobs {
		j.out, j.st = run(j)
	}
	rounds := 20
	if raceOn {
		rounds = 3
	}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range rounds * len(jobs) {
				j := jobs[(k+w)%len(jobs)]
				out, st := run(j)
				if !bytes.Equal(out, j.out) || st != j.st {
					t.Errorf("%v: a concurrent rewrite differs from the sequential one", j.api)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	for _, j := range jobs {
		if out, st := run(j); !bytes.Equal(out, j.out) || st != j.st {
			t.Fatalf("%v: a later rewrite differs", j.api)
		}
	}
}

// A clone shares nothing with its original: a shadow-mode rewrite on the
// clone leaves the run's state as it was.
func TestStateCloneSharesNothing(t *testing.T) {
	s := &State{Facts: []Fact{{Key: "k", Value: "v"}}, Blobs: map[string]string{"h": "blob-1"}}
	c := s.Clone()
	c.Facts[0].Value = "changed"
	c.Facts = append(c.Facts, Fact{Key: "k2"})
	c.Blobs["h2"] = "blob-2"
	if s.Facts[0].Value != "v" || len(s.Facts) != 1 || len(s.Blobs) != 1 {
		t.Fatalf("original changed through its clone: %+v", s)
	}
}
