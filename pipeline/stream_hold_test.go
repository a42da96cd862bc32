package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
)

// holdStreams are streamed answers whose tool call's deltas are cut in many
// pieces and interleaved with text, with the bytes the client receives
// when nothing is withheld, and a piece of each tool call's own events.
var holdStreams = []struct {
	desc  string
	codec wire.Codec
	body  string
	// stream is the upstream's answer; want what the client receives
	// (the upstream's bytes, or those less the usage chunk the gateway
	// asked for).
	stream, want string
	// text is an event before the first tool call; tool a piece of its
	// first event that no earlier event carries.
	text, tool string
}{
	chatHoldStream(true), chatHoldStream(false),
	{
		desc: "anthropic", codec: anthropic.Messages{},
		body:   `{"model":"claude-haiku-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"read","input_schema":{"type":"object"}}]}`,
		stream: anthropicHoldStream(), text: `"text":"Let me look."`, tool: `"tool_use"`,
	},
	{
		desc: "openai responses", codec: openai.Responses{},
		body:   `{"model":"gpt-5.5","stream":true,"input":"go","tools":[{"type":"function","name":"read","parameters":{"type":"object"}}]}`,
		stream: responsesHoldStream(), text: `"delta":"Let me look."`, tool: `"function_call"`,
	},
}

func chatHoldStream(includeUsage bool) (s struct {
	desc         string
	codec        wire.Codec
	body         string
	stream, want string
	text, tool   string
}) {
	chunk := func(choices string) string {
		return `data: {"id":"chatcmpl-h","object":"chat.completion.chunk","created":7,"model":"gpt-4o-mini","choices":` + choices + "}\n\n"
	}
	delta := func(d string) string { return chunk(`[{"index":0,"delta":` + d + `,"finish_reason":null}]`) }
	var b strings.Builder
	b.WriteString(delta(`{"role":"assistant","content":""}`))
	b.WriteString(delta(`{"content":"Let me look."}`))
	for i, c := range []string{"a", "b"} {
		b.WriteString(delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"call_%s","type":"function","function":{"name":"read","arguments":""}}]}`, i, c)))
		for _, piece := range []string{`{\"pa`, `th\":`, `\"/etc/`, `host`, `s\"}`} {
			b.WriteString(delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":"%s"}}]}`, i, piece)))
			b.WriteString(delta(`{"content":" and"}`))
		}
	}
	b.WriteString(chunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`))
	want := b.String()
	b.WriteString(chunk(`[],"usage":{"prompt_tokens":300,"completion_tokens":20,"total_tokens":320}`))
	b.WriteString("data: [DONE]\n\n")
	s.desc, s.codec, s.stream, s.want = "openai chat", openai.Chat{}, b.String(), want+"data: [DONE]\n\n"
	s.body = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]}`
	if includeUsage {
		s.desc += " include_usage"
		s.body = strings.Replace(s.body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		s.want = s.stream
	}
	s.text, s.tool = `"content":"Let me look."`, "tool_calls"
	return s
}

func anthropicHoldStream() string {
	var b strings.Builder
	ev := func(name, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_h","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":300,"output_tokens":1}}}`)
	ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me look."}}`)
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("ping", `{"type":"ping"}`)
	ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_h","name":"read","input":{}}}`)
	for _, piece := range []string{`{\"pa`, `th\":`, `\"/etc/`, `host`, `s\"}`} {
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"`+piece+`"}}`)
		ev("ping", `{"type":"ping"}`)
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":1}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}`)
	ev("message_stop", `{"type":"message_stop"}`)
	return b.String()
}

func responsesHoldStream() string {
	var b strings.Builder
	seq := 0
	ev := func(typ, rest string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, rest)
		seq++
	}
	msg := `{"id":"msg_h","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Let me look.","annotations":[]}]}`
	call := `{"id":"fc_h","type":"function_call","status":"completed","call_id":"call_h","name":"read","arguments":"{\"path\":\"/etc/hosts\"}"}`
	ev("response.created", `"response":{"id":"resp_h","object":"response","status":"in_progress","model":"gpt-5.5","output":[],"usage":null}`)
	ev("response.output_item.added", `"output_index":0,"item":{"id":"msg_h","type":"message","status":"in_progress","role":"assistant","content":[]}`)
	ev("response.output_text.delta", `"item_id":"msg_h","output_index":0,"content_index":0,"delta":"Let me look."`)
	ev("response.output_item.done", `"output_index":0,"item":`+msg)
	ev("response.output_item.added", `"output_index":1,"item":{"id":"fc_h","type":"function_call","status":"in_progress","call_id":"call_h","name":"read","arguments":""}`)
	for _, piece := range []string{`{\"pa`, `th\":`, `\"/etc/`, `host`, `s\"}`} {
		ev("response.function_call_arguments.delta", `"item_id":"fc_h","output_index":1,"delta":"`+piece+`"`)
	}
	ev("response.output_item.done", `"output_index":1,"item":`+call)
	ev("response.completed", `"response":{"id":"resp_h","object":"response","status":"completed","model":"gpt-5.5","output":[`+msg+`,`+call+`],"usage":{"input_tokens":300,"output_tokens":20,"total_tokens":320}}`)
	return b.String()
}

// A streamed tool call is held until the answer is judged, and released
// unchanged when the run goes on: text before it flows as it arrives,
// nothing of the call reaches the client before the verdict, and the client
// receives the upstream's bytes exactly, whatever the cuts.
func TestStreamedToolCallHeldThenReleasedUnchanged(t *testing.T) {
	t.Parallel()
	for _, tc := range holdStreams {
		for _, cut := range []int{1, 7, 64, 1 << 20} {
			t.Run(fmt.Sprintf("%s/cut=%d", tc.desc, cut), func(t *testing.T) {
				t.Parallel()
				p := newPipeline(t, nil, 0)
				turn := p.Begin(context.Background(), &pipeline.Call{Body: []byte(tc.body), RunID: "r-hold"}, tc.codec)
				if turn.Answer != nil {
					t.Fatalf("refused: %s", turn.Answer.Body)
				}
				var got bytes.Buffer
				// The first tool call's first event ends at toolEnd.
				toolEnd := strings.Index(tc.stream, tc.tool)
				toolEnd += strings.Index(tc.stream[toolEnd:], "\n\n") + 2
				for i := 0; i < len(tc.stream); i += cut {
					end := min(i+cut, len(tc.stream))
					got.Write(turn.Feed([]byte(tc.stream[i:end])))
					whole := 0
					if i := strings.LastIndex(tc.stream[:end], "\n\n"); i >= 0 {
						whole = i + 2
					}
					if end < toolEnd && got.Len() != whole && (tc.want == "" || tc.want == tc.stream) {
						// Where nothing is dropped, every whole event before the call passes at once.
						t.Fatalf("%d bytes of whole events read before the tool call, %d relayed", whole, got.Len())
					}
				}
				got.Write(turn.End())
				before := got.String()
				if strings.Contains(before, tc.tool) {
					t.Fatalf("the tool call reached the client before the verdict: %q", before)
				}
				if cut < len(tc.stream) && !strings.Contains(before, tc.text) {
					t.Fatalf("text before the tool call was held: %q", before)
				}
				if !turn.Holding() {
					t.Fatal("nothing held")
				}
				p.Finish(context.Background(), turn, pipeline.Outcome{Status: 200, Streamed: true})
				got.Write(turn.Release())
				want := tc.want
				if want == "" {
					want = tc.stream
				}
				if got.String() != want {
					t.Fatalf("client received\n%q\nwant\n%q", got.String(), want)
				}
				if turn.Release() != nil {
					t.Fatal("released twice")
				}
			})
		}
	}
}

// When the run ends on the answer, the held bytes are replaced in the same
// stream: the events before the call and the text interleaved with it stay,
// the call and the stream's end give way to the final answer, which ends
// the stream as the API does and carries the upstream's usage.
func TestStreamedToolCallReplacedByTheFinalAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range holdStreams {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			req, err := tc.codec.ParseRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			tap := tc.codec.NewStreamTap(&req)
			start := strings.Index(tc.stream, tc.tool)
			start = strings.LastIndex(tc.stream[:start], "\n\n") + 2
			sent := string(tap.Feed([]byte(tc.stream[:start])))
			held := string(tap.Feed([]byte(tc.stream[start:]))) + string(tap.End())
			got := sent + string(tap.Replace([]byte(held), "Stopped."))
			if strings.Contains(got, tc.tool) {
				t.Fatalf("a tool call left in the final answer:\n%s", got)
			}
			again := tc.codec.NewStreamTap(&req)
			again.Feed([]byte(got))
			again.End()
			r := again.Response()
			if !again.Done() || r.FinishReason != "stop" || len(r.ToolCalls) != 0 {
				t.Fatalf("done %v finish %q calls %d:\n%s", again.Done(), r.FinishReason, len(r.ToolCalls), got)
			}
			if !strings.HasPrefix(r.Text, "Let me look.") || !strings.HasSuffix(r.Text, "Stopped.") {
				t.Fatalf("text %q", r.Text)
			}
			asked := tc.codec.API() != wire.APIChat || req.IncludeUsage
			if asked && (!r.HasUsage || r.Usage.OutputTokens != 20 || r.Usage.InputTokens != 300) {
				t.Fatalf("usage %+v (%v)", r.Usage, r.HasUsage)
			}
			if !asked && r.HasUsage {
				t.Fatalf("usage the client did not ask for: %+v", r.Usage)
			}
		})
	}
}

// BenchmarkStreamRelay is the gateway's own work on a streamed answer read
// event by event, driven as a front end drives it (Exchange): the relay's
// cost per chunk (ns/chunk) and the time from the first read to its text
// reaching the relay (first-text-ns), for a text answer and for the same
// text followed by a tool call that is held and then released.
func BenchmarkStreamRelay(b *testing.B) {
	text := holdStreams[0].stream[:strings.Index(holdStreams[0].stream, `"tool_calls"`)]
	text = text[:strings.LastIndex(text, "\n\n")+2]
	for _, bc := range []struct{ desc, stream string }{
		{"text", text + strings.Repeat(text[strings.Index(text, "\n\n")+2:], 8) + "data: [DONE]\n\n"},
		{"text then held tool call", holdStreams[0].stream},
	} {
		b.Run(bc.desc, func(b *testing.B) {
			var chunks [][]byte
			for s := bc.stream; s != ""; {
				i := strings.Index(s, "\n\n") + 2
				chunks = append(chunks, []byte(s[:i]))
				s = s[i:]
			}
			p := newPipeline(b, nil, 0)
			ctx := context.Background()
			body := []byte(holdStreams[0].body)
			var relay, first time.Duration
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				// A run each: the same call again would be a loop.
				n++
				x, _ := p.Open(ctx, &pipeline.Call{Body: body, RunID: fmt.Sprintf("r-relay-%d", n)}, openai.Chat{})
				x.Forward(func(string, string) {})
				x.Respond(200, true)
				start, seen := time.Now(), false
				for _, c := range chunks {
					out, _ := x.Feed(c)
					if !seen && bytes.Contains(out, []byte(`"content":"`)) {
						first += time.Since(start)
						seen = true
					}
				}
				x.End()
				relay += time.Since(start)
				x.Finish(nil, nil)
			}
			b.ReportMetric(float64(relay.Nanoseconds())/float64(b.N*len(chunks)), "ns/chunk")
			b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-text-ns")
		})
	}
}
