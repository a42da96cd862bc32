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
