package anthropic

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/haltline/haltline/wire"
)

// compact normalises tool arguments: a non-streamed response carries its
// input pretty-printed, a stream carries what the model wrote.
func compact(tb testing.TB, b []byte) string {
	tb.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		tb.Fatalf("arguments %q are not JSON: %v", b, err)
	}
	return buf.String()
}

func normalise(tb testing.TB, r wire.Response) wire.Response {
	tb.Helper()
	calls := make([]wire.ToolCall, len(r.ToolCalls))
	for i, c := range r.ToolCalls {
		c.Arguments = []byte(compact(tb, c.Arguments))
		calls[i] = c
	}
	r.ToolCalls = calls
	return r
}

func call(id, name, args string) wire.ToolCall {
	return wire.ToolCall{ID: id, Name: name, Arguments: []byte(args)}
}

func TestParseResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		file string
		want wire.Response
	}{
		{
			desc: "cache write counted once inside input",
			file: "response-tool-use-cache-write.json",
			want: wire.Response{
				ID: "msg_01NeniT1gcChrmdsa2Lkpsne", Model: "claude-sonnet-4-5-20250929",
				Usage:        wire.Usage{InputTokens: 7 + 1069, OutputTokens: 60, CacheWriteTokens: 1069},
				HasUsage:     true,
				ToolCalls:    []wire.ToolCall{call("toolu_01JA8S35SNy1ruX8gAXgb3Y6", "lookup_refund_policy", `{"order_id":"order-123"}`)},
				FinishReason: "tool_calls",
			},
		},
		{
			desc: "parallel tool use with text",
			file: "response-parallel-tool-use.json",
			want: wire.Response{
				ID: "msg_011S3wxtqL5CVescWqS3zeg2", Model: "claude-haiku-4-5-20251001",
				Usage:    wire.Usage{InputTokens: 423, OutputTokens: 202},
				HasUsage: true,
				ToolCalls: []wire.ToolCall{
					call("toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", `{"name":"Alice"}`),
					call("toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", `{"name":"Bob"}`),
					call("toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", `{"name":"Charlie"}`),
					call("toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", `{"name":"Daisy"}`),
				},
				FinishReason: "tool_calls",
				Text:         familyText,
				TextHash:     wire.TextHash(familyText),
			},
		},
		{
			desc: "overloaded error body",
			file: "error-529-overloaded.json",
			want: wire.Response{FinishReason: "error", ErrorMessage: "Overloaded", ToolCalls: []wire.ToolCall{}},
		},
		{
			desc: "invalid request error body",
			file: "error-400-invalid-request.json",
			want: wire.Response{FinishReason: "error", ErrorMessage: "This model does not support effort level 'xhigh'. Supported levels: high, low, max, medium.", ToolCalls: []wire.ToolCall{}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got, err := Messages{}.ParseResponse(fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := normalise(t, got), normalise(t, tc.want); !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseResponseStopReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc, stop, want string
	}{
		{"end_turn", "end_turn", "stop"},
		{"stop_sequence", "stop_sequence", "stop"},
		{"tool_use", "tool_use", "tool_calls"},
		{"max_tokens", "max_tokens", "length"},
		{"context window", "model_context_window_exceeded", "length"},
		{"refusal", "refusal", "content_filter"},
		{"pause_turn stays unknown", "pause_turn", ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"  ok  "}],"stop_reason":"` + tc.stop + `","usage":{"input_tokens":1,"cache_read_input_tokens":5,"output_tokens":2}}`
			got, err := Messages{}.ParseResponse([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if got.FinishReason != tc.want {
				t.Errorf("FinishReason %q, want %q", got.FinishReason, tc.want)
			}
			if got.Usage != (wire.Usage{InputTokens: 6, OutputTokens: 2, CachedTokens: 5}) || got.TextHash != wire.TextHash("ok") {
				t.Errorf("usage %+v hash %x", got.Usage, got.TextHash)
			}
		})
	}
}

func TestParseResponseRejects(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, `[]`, `"x"`, `{"id":`} {
		if _, err := (Messages{}).ParseResponse([]byte(body)); err == nil {
			t.Errorf("ParseResponse(%q): no error", body)
		}
	}
}

func TestTextHead(t *testing.T) {
	t.Parallel()
	long := bytes.Repeat([]byte("é"), wire.TextKeep) // 2 bytes a rune
	body := `{"content":[{"type":"text","text":"x` + string(long) + `"}],"stop_reason":"end_turn"}`
	got, err := Messages{}.ParseResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Text) > wire.TextKeep || len(got.Text) < wire.TextKeep-3 || !json.Valid([]byte(`"`+got.Text+`"`)) {
		t.Errorf("head of %d bytes, valid UTF-8 = %v", len(got.Text), json.Valid([]byte(`"`+got.Text+`"`)))
	}
	if got.TextHash != wire.TextHash("x"+string(long)) {
		t.Error("hash is not of the whole text")
	}
}

// feed runs a stream through a new tap in pieces cut by cuts and returns
// what the tap passed on and its Response.
func feed(tb testing.TB, stream []byte, cuts func(rest int) int) ([]byte, wire.Response) {
	tb.Helper()
	tap := Messages{}.NewStreamTap(&wire.Request{Stream: true})
	var out []byte
	for rest := stream; len(rest) > 0; {
		n := min(max(cuts(len(rest)), 1), len(rest))
		// A fresh copy per piece, overwritten after Feed: the tap must not
		// keep the caller's buffer.
		piece := append([]byte(nil), rest[:n]...)
		out = append(out, tap.Feed(piece)...)
		for i := range piece {
			piece[i] = 0
		}
		rest = rest[n:]
	}
	out = append(out, tap.End()...)
	resp := *tap.Response()
	resp.ToolCalls = append([]wire.ToolCall(nil), resp.ToolCalls...)
	return out, resp
}

func whole(rest int) int { return rest }

func TestStreamTap(t *testing.T) {
	t.Parallel()
	weather := "I'll check the current weather in Paris for you."
	tests := []struct {
		desc string
		file string
		want wire.Response
	}{
		{
			desc: "tool call reassembled from split partial_json",
			file: "stream-tool-use.sse",
			want: wire.Response{
				ID: "msg_019Q1hrJbZG26Fb9BQhrkHEr", Model: "claude-sonnet-4-20250514",
				Usage: wire.Usage{InputTokens: 377, OutputTokens: 65}, HasUsage: true,
				ToolCalls:    []wire.ToolCall{call("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather", `{"location": "Paris"}`)},
				FinishReason: "tool_calls",
				Text:         weather, TextHash: wire.TextHash(weather),
			},
		},
		{
			desc: "padded JSON, input repeated in message_delta counted once",
			file: "stream-text-padded.sse",
			want: wire.Response{
				ID: "msg_018E1hg8GoVTGEKQY3ovMcSJ", Model: "claude-sonnet-4-5-20250929",
				Usage: wire.Usage{InputTokens: 20, OutputTokens: 5}, HasUsage: true,
				FinishReason: "stop",
				Text:         "2", TextHash: wire.TextHash("2"),
			},
		},
		{
			desc: "error event mid-stream",
			file: "stream-error-overloaded.sse",
			want: wire.Response{FinishReason: "error", ErrorMessage: "Overloaded"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			stream := fixture(t, tc.file)
			out, got := feed(t, stream, whole)
			if !bytes.Equal(out, stream) {
				t.Errorf("tap changed the stream")
			}
			if tc.want.ToolCalls != nil {
				// Streamed arguments are exactly what the model wrote.
				if string(got.ToolCalls[0].Arguments) != string(tc.want.ToolCalls[0].Arguments) {
					t.Errorf("arguments %s, want %s", got.ToolCalls[0].Arguments, tc.want.ToolCalls[0].Arguments)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A tap fed in random pieces passes exactly its input and reads the same
// Response as from one whole feed.
func TestStreamTapRandomCuts(t *testing.T) {
	t.Parallel()
	files := []string{"stream-tool-use.sse", "stream-text-padded.sse", "stream-error-overloaded.sse"}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			stream := fixture(t, file)
			_, want := feed(t, stream, whole)
			crlf := bytes.ReplaceAll(stream, []byte("\n"), []byte("\r\n"))
			_, wantCRLF := feed(t, crlf, whole)
			if !reflect.DeepEqual(want, wantCRLF) {
				t.Errorf("CRLF stream read differently:\n%+v\n%+v", wantCRLF, want)
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(stream))))
			for i := range 300 {
				maxCut := 1 + rng.IntN(64)
				if i%3 == 0 {
					maxCut = 3
				}
				cuts := func(int) int { return 1 + rng.IntN(maxCut) }
				for _, s := range [][]byte{stream, crlf} {
					out, got := feed(t, s, cuts)
					if !bytes.Equal(out, s) {
						t.Fatalf("round %d: output differs from input", i)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("round %d: got %+v\nwant %+v", i, got, want)
					}
				}
			}
		})
	}
}

// A stream cut off before its final blank line still yields its last event.
func TestStreamTapUnterminatedTail(t *testing.T) {
	t.Parallel()
	stream := bytes.TrimRight(fixture(t, "stream-text-padded.sse"), "\n")
	stream = bytes.TrimSuffix(stream, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"    }"))
	stream = bytes.TrimRight(stream, "\n")
	_, got := feed(t, stream, whole)
	if got.FinishReason != "stop" || got.Usage.OutputTokens != 5 {
		t.Errorf("last event lost: %+v", got)
	}
}

// Text deltas with escapes and an escaped partial_json in many pieces.
func TestStreamTapEscapes(t *testing.T) {
	t.Parallel()
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":10,\"cache_creation_input_tokens\":2,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\\nb \\\"q\\\" \\u00e9\\ud83d\\ude00\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"u\",\"name\":\"g\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"p\\\": \\\"a\\\\\\\\b\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":9}}\n\n"
	_, got := feed(t, []byte(stream), whole)
	text := "a\nb \"q\" é😀"
	want := wire.Response{
		ID: "m", Model: "x",
		Usage:    wire.Usage{InputTokens: 15, OutputTokens: 9, CachedTokens: 10, CacheWriteTokens: 2},
		HasUsage: true,
		ToolCalls: []wire.ToolCall{
			call("t", "f", `{}`),
			call("u", "g", `{"p": "a\\b"}`),
		},
		FinishReason: "length",
		Text:         text, TextHash: wire.TextHash(text),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// Done turns true in the very Feed that completes the terminal event, and
// not before, whatever the cuts; a terminal event left without its blank
// line (stream-tool-use.sse ends so) is read by End.
func TestStreamTapDone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		file     string
		terminal string
	}{
		{"message_stop", "stream-tool-use.sse", "event: message_stop"},
		{"padded message_stop", "stream-text-padded.sse", "event: message_stop"},
		{"error event", "stream-error-overloaded.sse", "event: error"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			stream := fixture(t, tc.file)
			start := bytes.LastIndex(stream, []byte(tc.terminal))
			end := len(stream) + 1 // unterminated: only End completes it
			if i := bytes.Index(stream[start:], []byte("\n\n")); i >= 0 {
				end = start + i + 2
			}
			rng := rand.New(rand.NewPCG(3, uint64(len(stream))))
			for range 200 {
				tap := Messages{}.NewStreamTap(&wire.Request{Stream: true})
				for fed := 0; fed < len(stream); {
					n := min(1+rng.IntN(40), len(stream)-fed)
					tap.Feed(stream[fed : fed+n])
					fed += n
					if want := fed >= end; tap.Done() != want {
						t.Fatalf("after %d of %d bytes (event ends at %d): Done %v", fed, len(stream), end, tap.Done())
					}
				}
				tap.End()
				if !tap.Done() {
					t.Fatal("not Done after End")
				}
			}
		})
	}
}
