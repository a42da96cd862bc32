package mcp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to every parser of the package: request,
// tools/call parameters, JSON and SSE responses, tool results, tools/list
// and the schema check. None may panic, and what parses must render again.
func FuzzParse(f *testing.F) {
	entries, _ := os.ReadDir("testdata")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,{"b":null}]}}}`))
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n"))
	f.Add([]byte(`[{"jsonrpc":"2.0"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := ParseRequest(b); err == nil {
			if _, err := json.Marshal(m); err != nil {
				t.Fatalf("parsed request does not render: %v", err)
			}
			if p, err := ParseCall(m.Params); err == nil {
				_ = CheckArguments(b, p.Arguments)
			}
		}
		for _, sse := range []bool{false, true} {
			rb, err := ParseResponse(b, sse, json.RawMessage("1"))
			if err != nil {
				continue
			}
			m := rb.Messages[rb.Index]
			if r, err := ParseToolResult(m.Result); err == nil {
				_ = r.Text()
				_ = r.ReplaceText("x")
			}
			_, _ = ParseToolsList(m.Result)
			if out := rb.Encode(ResultMessage(json.RawMessage("1"), []byte(`{}`))); len(out) == 0 {
				t.Fatal("empty re-encoding")
			}
		}
	})
}
