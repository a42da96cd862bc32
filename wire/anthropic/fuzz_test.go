package anthropic

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/haltline/haltline/wire"
)

var (
	requestSeeds  = []string{"request-tool-result.json"}
	responseSeeds = []string{"response-tool-use-cache-write.json", "response-parallel-tool-use.json", "error-400-invalid-request.json", "error-529-overloaded.json"}
	streamSeeds   = []string{"stream-tool-use.sse", "stream-text-padded.sse", "stream-error-overloaded.sse"}
)

// FuzzParseRequest: never panics; an accepted body also survives the edits,
// which never write to it. The seeds are large, so run it with a short
// -fuzzminimizetime (e.g. 2s): minimising a new 3 KB input otherwise holds
// the worker for up to a minute, which looks like a stall.
func FuzzParseRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add(fixture(f, s))
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","content":"a\u00e9"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"\n"}]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		req, err := Messages{}.ParseRequest(body)
		if err != nil {
			return
		}
		if _, err := (Messages{}).PrepareUpstream(body, &req, 100); err != nil {
			t.Logf("PrepareUpstream: %v", err)
		}
		if _, err := (Messages{}).WrapUp(body, &req, "wrap up", 100); err != nil {
			t.Logf("WrapUp: %v", err)
		}
		if !bytes.Equal(body, orig) {
			t.Fatal("body modified")
		}
	})
}

func FuzzParseResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(fixture(f, s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		resp, err := Messages{}.ParseResponse(body)
		if err == nil && len(resp.Text) > wire.TextKeep {
			t.Fatalf("text head of %d bytes", len(resp.Text))
		}
	})
}

// FuzzStreamTap: whatever the bytes and the cuts, the output is the input,
// the reading is that of one whole feed, and nothing panics. cut seeds the
// piece sizes.
func FuzzStreamTap(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add(fixture(f, s), uint64(7))
		f.Add(fixture(f, s), uint64(0x0102030405))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint64) {
		state := cut | 1
		cuts := func(rest int) int {
			state ^= state << 13
			state ^= state >> 7
			state ^= state << 17
			return 1 + int(state%97)
		}
		out, got := feed(t, stream, cuts)
		if !bytes.Equal(out, stream) {
			t.Fatal("output differs from input")
		}
		if _, want := feed(t, stream, whole); !reflect.DeepEqual(got, want) {
			t.Fatalf("cut feed read %+v, whole feed %+v", got, want)
		}
	})
}
