package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire/openai"
)

// A streamed answer driven through the Exchange: done comes with the
// terminal event, Finish gives the held tool call as the Reply's tail, and
// the client's bytes are the stream's, in order.
func TestExchangeStreamGivesTheHeldCallAsTail(t *testing.T) {
	t.Parallel()
	hs := holdStreams[0]
	p := newPipeline(t, nil, 0)
	ctx := context.Background()
	x, rep := p.Open(ctx, &pipeline.Call{Body: []byte(hs.body), RunID: "r-x-stream"}, hs.codec)
	if rep != nil {
		t.Fatalf("answered at Open: %+v", rep.Answer)
	}
	x.Forward(func(string, string) {})
	if !x.Respond(200, true) {
		t.Fatal("a 2xx event stream is not relayed as a stream")
	}
	var got bytes.Buffer
	settled := false
	for s := hs.stream; s != ""; {
		i := strings.Index(s, "\n\n") + 2
		out, done := x.Feed([]byte(s[:i]))
		got.Write(out)
		if done != (s[i:] == "") {
			t.Fatalf("done %v with %d bytes of the stream left", done, len(s)-i)
		}
		if done {
			rep := x.Finish(nil, nil)
			if rep.Answer != nil || rep.Cut || len(rep.Tail) == 0 {
				t.Fatalf("finished stream: answer %v, cut %v, tail %d bytes", rep.Answer, rep.Cut, len(rep.Tail))
			}
			got.Write(rep.Tail)
			settled = true
		}
		s = s[i:]
	}
	got.Write(x.End())
	if !settled || got.String() != hs.want {
		t.Fatalf("settled %v; client got\n%s\nwant\n%s", settled, got.String(), hs.want)
	}
	if again := x.Finish(nil, nil); again.Answer != nil || again.Tail != nil || again.Cut {
		t.Fatalf("a second Finish gave %+v", again)
	}
}

// A stream that ends before its terminal event is reported cut, with the
// provider's error event and answer to tell the client so.
func TestExchangeReportsACutStream(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, nil, 0)
	ctx := context.Background()
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"go"}]}`
	x, _ := p.Open(ctx, &pipeline.Call{Body: []byte(body), RunID: "r-x-cut"}, openai.Chat{})
	x.Forward(func(string, string) {})
	x.Respond(200, true)
	out, done := x.Feed([]byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"))
	if done || len(out) == 0 {
		t.Fatalf("text not relayed as it came (done %v, %d bytes)", done, len(out))
	}
	x.End()
	rep := x.Finish(nil, nil)
	if !rep.Cut || rep.Answer != nil {
		t.Fatalf("cut %v, answer %v", rep.Cut, rep.Answer)
	}
	if ev := x.CutEvent(); !bytes.Contains(ev, []byte("terminal event")) {
		t.Fatalf("cut event %q", ev)
	}
	if a := x.CutAnswer(); a.Status != 502 {
		t.Fatalf("cut answer %d", a.Status)
	}
}

// An upstream that never answered: Finish replaces the answer with the
// provider's error, and the reply's headers carry its content type and the
// run.
func TestExchangeTransportFailureIsAnAnswer(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, nil, 0)
	ctx := context.Background()
	x, _ := p.Open(ctx, &pipeline.Call{Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"go"}]}`), RunID: "r-x-fail"}, openai.Chat{})
	x.Forward(func(string, string) {})
	rep := x.Finish(nil, errors.New("connection reset"))
	if rep.Answer == nil || rep.Answer.Status != 502 {
		t.Fatalf("answer %+v", rep.Answer)
	}
	h := map[string]string{}
	rep.Headers(func(k, v string) { h[k] = v })
	if h["Content-Type"] != "application/json" || h[pipeline.HeaderRunID] != "r-x-fail" || h[pipeline.HeaderRunState] == "" {
		t.Fatalf("headers %v", h)
	}
}

// A call the gateway answers itself is finished at Open: the Reply is the
// answer, with the run's headers, and nothing is left to finish.
func TestExchangeAnsweredAtOpen(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, nil, 0)
	x, rep := p.Open(context.Background(), &pipeline.Call{Body: []byte(`not json`), RunID: "r-x-bad"}, openai.Chat{})
	if rep == nil || rep.Answer == nil || rep.Answer.Status != 400 {
		t.Fatalf("reply %+v", rep)
	}
	if again := x.Finish(nil, errors.New("late")); again.Answer != nil {
		t.Fatalf("Finish after an answer at Open gave %+v", again.Answer)
	}
}

// The run headers are read in lower case and recognised in any case; an
// answer's own headers say not to retry when it must not be.
func TestRunHeaderNames(t *testing.T) {
	t.Parallel()
	sent := map[string]string{"x-run-id": "r-1", "x-session-id": "s", "x-agent-id": "a",
		"x-parent-run-id": "r-0", "x-task-type": "t", "x-run-budget": "max_steps=3"}
	var c pipeline.Call
	c.ReadHeaders(func(name string) string { return sent[name] })
	if c.RunID != "r-1" || c.SessionID != "s" || c.AgentID != "a" || c.ParentRunID != "r-0" || c.TaskType != "t" || c.RunBudget != "max_steps=3" {
		t.Fatalf("call %+v", c)
	}
	var tc pipeline.ToolCall
	tc.ReadHeaders(func(name string) string { return sent[name] })
	if tc.RunID != "r-1" || tc.RunBudget != "max_steps=3" {
		t.Fatalf("tool call %+v", tc)
	}
	for name, want := range map[string]bool{
		"X-Run-Id": true, "x-session-id": true, "X-AGENT-ID": true, "X-Parent-Run-Id": true,
		"x-task-type": true, "X-Run-Deadline-Ms": true, "X-Request-Id": false, "Authorization": false, "X-Run": false,
	} {
		if pipeline.IsRunHeader(name) != want {
			t.Errorf("IsRunHeader(%q) = %v", name, !want)
		}
	}
	if pipeline.HasRunPrefix("X-Session-Id") || !pipeline.HasRunPrefix("x-run-state") {
		t.Error("HasRunPrefix")
	}
	h := map[string]string{}
	pipeline.AnswerHeaders(&pipeline.Answer{ContentType: "application/json", NoRetry: true}, func(k, v string) { h[k] = v })
	if h["Content-Type"] != "application/json" || h[pipeline.HeaderShouldRetry] != "false" {
		t.Fatalf("answer headers %v", h)
	}
}
