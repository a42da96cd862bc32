package openai

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/sse"
)

func seedFiles(f *testing.F, suffix string) {
	f.Helper()
	for _, dir := range []string{"chat", "responses"} {
		entries, err := os.ReadDir(filepath.Join("testdata", dir))
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), suffix) {
				f.Add(fixture(f, filepath.Join(dir, e.Name())))
			}
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	seedFiles(f, ".json")
	f.Add([]byte(`{"model":"m","stream":true,"messages":[{"role":"assistant","content":[{"type":"text","text":"\ud83d\ude00 \ud800"}],"tool_calls":[{"id":"a"}]}]}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call","call_id":"a"},{"role":"user","content":"x"}],"max_output_tokens":"9"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, c := range []wire.Codec{Chat{}, Responses{}} {
			orig := bytes.Clone(body)
			req, err := c.ParseRequest(body)
			if err != nil {
				continue
			}
			up, err := c.PrepareUpstream(body, &req, 64)
			if err != nil || !json.Valid(up) {
				t.Fatalf("%v: prepare gave invalid JSON %v: %s", c.API(), err, up)
			}
			w, err := c.WrapUp(body, &req, "wrap \"up\"", 64)
			if err != nil {
				continue // e.g. a responses body with a non-array input
			}
			if !json.Valid(w) {
				t.Fatalf("%v: wrap-up gave invalid JSON: %s", c.API(), w)
			}
			again, err := c.ParseRequest(w)
			if err != nil || again.HasTools || !again.NewUserTurn {
				t.Fatalf("%v: wrap-up re-parse %v %+v\n%s", c.API(), err, again, w)
			}
			if !bytes.Equal(body, orig) {
				t.Fatal("body modified")
			}
		}
	})
}

func FuzzParseResponse(f *testing.F) {
	seedFiles(f, ".json")
	f.Fuzz(func(t *testing.T, body []byte) {
		// A response is read exactly when it is one valid JSON object (the
		// chat parser validates in the pass that reads it).
		trimmed := bytes.TrimLeft(body, " \t\r\n")
		object := len(trimmed) > 0 && trimmed[0] == '{' && gjson.ValidBytes(body)
		for _, c := range []wire.Codec{Chat{}, Responses{}} {
			r, err := c.ParseResponse(body)
			if err == nil && len(r.Text) > wire.TextKeep {
				t.Fatal("text head too long")
			}
			if (err == nil) != object {
				t.Fatalf("%T: err %v for a body that is an object: %v", c, err, object)
			}
		}
	})
}

// cutsOf turns two numbers into cut offsets within n bytes.
func cutsOf(n int, a, b uint16) []int {
	x, y := int(a)%(n+1), int(b)%(n+1)
	return []int{min(x, y), max(x, y)}
}

func FuzzChatTap(f *testing.F) {
	for _, name := range []string{"stream-text-include-usage.sse", "stream-parallel-tool-calls.sse", "stream-parallel-tool-calls-2024.sse"} {
		f.Add(fixture(f, "chat/"+name), uint16(100), uint16(3000), false)
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\r\n\r\ndata: [DONE]"), uint16(5), uint16(40), false)
	f.Fuzz(func(t *testing.T, stream []byte, a, b uint16, includeUsage bool) {
		tap := Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: includeUsage})
		got := feedCuts(tap, stream, cutsOf(len(stream), a, b))
		want := stream
		if !includeUsage {
			want = withoutUsageEvents(stream)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("output differs\n got %q\nwant %q", got, want)
		}
		if r := tap.Response(); len(r.Text) > wire.TextKeep {
			t.Fatal("text head too long")
		}
	})
}

// FuzzChatTapRepeatedChunks checks the chat tap's reading of a chunk from
// where it stops repeating the last one's first bytes (chatTap.repeated):
// what the tap gathers is what it gathers when it reads every chunk whole.
func FuzzChatTapRepeatedChunks(f *testing.F) {
	for _, name := range []string{"stream-text-include-usage.sse", "stream-parallel-tool-calls.sse", "stream-parallel-tool-calls-2024.sse"} {
		f.Add(fixture(f, "chat/"+name))
	}
	const head = `data: {"id":"c1","object":"chat.completion.chunk","model":"m",`
	f.Add([]byte(head + `"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}` + "\n\n" +
		head + `"usage":{"prompt_tokens":3},"choices":[]}` + "\n\n" +
		head + `"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"c2","model":"n","error":{"message":"over"},"choices":[]}` + "\n\n" +
		head + `"choices":[{"index":1,"delta":{"content":"c"}},{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]}}]}` + "\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		skipping, whole := &chatTap{}, &chatTap{}
		for _, ev := range bytes.Split(stream, []byte("\n\n")) {
			skipping.read(ev)
			whole.repeated = whole.repeated[:0]
			whole.read(ev)
		}
		a, b := skipping.Response(), whole.Response()
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) || !bytes.Equal(skipping.text, whole.text) {
			t.Fatalf("reading from the repeated bytes differs:\n%s\n%s", ja, jb)
		}
	})
}

// TestChatTapSkipsRepeatedBytes checks that the tap does skip a real
// stream's repeated first bytes: after its first chunk, the tap holds them
// up to "choices".
func TestChatTapSkipsRepeatedBytes(t *testing.T) {
	tap := &chatTap{}
	evs := bytes.Split(fixture(t, "chat/stream-text-include-usage.sse"), []byte("\n\n"))
	tap.read(evs[0])
	_, data := sse.Fields(evs[1])
	want, _, _ := strings.Cut(string(data), `"choices"`)
	if string(tap.repeated) != want || len(want) < 100 {
		t.Fatalf("repeated bytes %q, want %q", tap.repeated, want)
	}
}

func FuzzResponsesTap(f *testing.F) {
	for _, name := range []string{"stream-function-call.sse", "stream-function-call-2025-03.sse"} {
		f.Add(fixture(f, "responses/"+name), uint16(100), uint16(3000))
	}
	f.Fuzz(func(t *testing.T, stream []byte, a, b uint16) {
		tap := Responses{}.NewStreamTap(&wire.Request{Stream: true})
		if got := feedCuts(tap, stream, cutsOf(len(stream), a, b)); !bytes.Equal(got, stream) {
			t.Fatal("responses tap changed the stream")
		}
		tap.Response()
	})
}
