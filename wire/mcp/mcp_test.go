package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// httpBody splits a captured .http response into its SSE flag and body.
func httpBody(t testing.TB, name string) (sseBody bool, body []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	head, body, _ := bytes.Cut(b, []byte("\n\n"))
	return bytes.Contains(bytes.ToLower(head), []byte("text/event-stream")), body
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	call, _ := os.ReadFile(filepath.Join("testdata", "tools-call-request.json"))
	initReq, _ := os.ReadFile(filepath.Join("testdata", "initialize-request.json"))
	cases := []struct {
		desc   string
		body   string
		code   int // 0: parses
		method string
	}{
		{desc: "spec tools/call", body: string(call), method: MethodToolsCall},
		{desc: "spec initialize", body: string(initReq), method: "initialize"},
		{desc: "notification", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`, method: "notifications/initialized"},
		{desc: "empty", body: ``, code: CodeParseError},
		{desc: "truncated", body: `{"jsonrpc":"2.0","id":1,`, code: CodeParseError},
		{desc: "batch", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, code: CodeInvalidRequest},
		{desc: "wrong version", body: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, code: CodeInvalidRequest},
		{desc: "object id", body: `{"jsonrpc":"2.0","id":{},"method":"ping"}`, code: CodeInvalidRequest},
		{desc: "nothing", body: `{"jsonrpc":"2.0","id":1}`, code: CodeInvalidRequest},
		{desc: "method not a string", body: `{"jsonrpc":"2.0","id":1,"method":7}`, code: CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m, err := ParseRequest([]byte(tc.body))
			if tc.code == 0 {
				if err != nil || m.Method != tc.method {
					t.Fatalf("got %q, %v", m.Method, err)
				}
				return
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Code != tc.code {
				t.Fatalf("err %v, want code %d", err, tc.code)
			}
		})
	}
}

func TestParseCall(t *testing.T) {
	t.Parallel()
	cases := []struct {
		desc, params, name, args string
		bad                      bool
	}{
		{desc: "plain", params: `{"name":"echo","arguments":{"message":"hi"}}`, name: "echo", args: `{"message":"hi"}`},
		{desc: "no arguments", params: `{"name":"ping"}`, name: "ping", args: `{}`},
		{desc: "null arguments", params: `{"name":"ping","arguments":null}`, name: "ping", args: `{}`},
		{desc: "no name", params: `{"arguments":{}}`, bad: true},
		{desc: "array arguments", params: `{"name":"x","arguments":[1]}`, bad: true},
		{desc: "no params", params: ``, bad: true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			p, err := ParseCall(json.RawMessage(tc.params))
			if tc.bad {
				if err == nil {
					t.Fatalf("parsed %+v", p)
				}
				return
			}
			if err != nil || p.Name != tc.name || string(p.Arguments) != tc.args {
				t.Fatalf("got %+v, %v", p, err)
			}
		})
	}
}

func TestParseResponseFixtures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		desc, file, id string
		tools          int
		rpcErr         int
	}{
		{desc: "SSE tools/list (everything)", file: "sse-tools-list.response.http", id: "2", tools: 13},
		{desc: "JSON tools/list", file: "json-tools-list.response.http", id: "2", tools: -1},
		{desc: "SSE tools/call", file: "sse-tools-call.response.http", id: "3"},
		{desc: "SSE method not found", file: "sse-method-not-found.response.http", id: "6", rpcErr: CodeMethodNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			isSSE, body := httpBody(t, tc.file)
			rb, err := ParseResponse(body, isSSE, json.RawMessage(tc.id))
			if err != nil {
				t.Fatal(err)
			}
			m := rb.Messages[rb.Index]
			if tc.rpcErr != 0 {
				if m.Error == nil || m.Error.Code != tc.rpcErr {
					t.Fatalf("error %+v", m.Error)
				}
				return
			}
			if tc.tools != 0 {
				tools, err := ParseToolsList(m.Result)
				if err != nil || (tc.tools > 0 && len(tools) != tc.tools) || len(tools) == 0 {
					t.Fatalf("%d tools, %v", len(tools), err)
				}
				withRead, err := AppendTool(m.Result, []byte(`{"name":"haltline_read_blob","inputSchema":{"type":"object"}}`))
				if err != nil {
					t.Fatal(err)
				}
				again, _ := ParseToolsList(withRead)
				if len(again) != len(tools)+1 || again[len(tools)].Name != "haltline_read_blob" {
					t.Fatalf("append: %d tools", len(again))
				}
				// Re-framed, the body parses again to the same response.
				out := rb.Encode(ResultMessage(json.RawMessage(tc.id), withRead))
				rb2, err := ParseResponse(out, isSSE, json.RawMessage(tc.id))
				if err != nil || len(rb2.Messages) != len(rb.Messages) {
					t.Fatalf("re-encoded: %v", err)
				}
				return
			}
			r, err := ParseToolResult(m.Result)
			if err != nil || r.Text() == "" {
				t.Fatalf("result %+v %v", r, err)
			}
		})
	}
}

func TestParseResponseGarbage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		desc, body string
		sse        bool
	}{
		{desc: "html", body: "<html>", sse: false},
		{desc: "other id", body: `{"jsonrpc":"2.0","id":9,"result":{}}`},
		{desc: "sse without response", body: "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n", sse: true},
		{desc: "sse garbage", body: "data: nope\n\n", sse: true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if _, err := ParseResponse([]byte(tc.body), tc.sse, json.RawMessage("1")); err == nil {
				t.Fatal("parsed")
			}
		})
	}
}

func TestCheckArguments(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer"},
		"mode":{"enum":["r","w"]},"tags":{"type":"array","items":{"type":"string"}},
		"opt":{"type":["string","null"]}},"required":["path"]}`
	cases := []struct {
		desc, args string
		want       string // "" = valid; else a substring of the error
	}{
		{desc: "valid", args: `{"path":"a","n":3,"mode":"r","tags":["x"],"opt":null}`},
		{desc: "missing required", args: `{"n":1}`, want: `missing required property "path"`},
		{desc: "wrong type", args: `{"path":5}`, want: "arguments.path: want string, got integer"},
		{desc: "not integer", args: `{"path":"a","n":1.5}`, want: "want integer"},
		{desc: "enum", args: `{"path":"a","mode":"x"}`, want: "must be one of"},
		{desc: "items", args: `{"path":"a","tags":[1]}`, want: "arguments.tags[0]"},
		{desc: "not JSON", args: `{`, want: "not valid JSON"},
		{desc: "unknown keywords are ignored", args: `{"path":"a","extra":true}`},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			err := CheckArguments([]byte(schema), []byte(tc.args))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if CheckArguments(nil, []byte(`{}`)) != nil || CheckArguments([]byte(`not json`), []byte(`{}`)) != nil {
		t.Fatal("no schema must check nothing")
	}
}

func TestResultBuilders(t *testing.T) {
	t.Parallel()
	res := TextResult("hello", true, map[string]any{"ticket": "t-1"})
	msg := ResultMessage(json.RawMessage(`"abc"`), res)
	var m Message
	if err := json.Unmarshal(msg, &m); err != nil || string(m.ID) != `"abc"` {
		t.Fatalf("%s %v", msg, err)
	}
	r, _ := ParseToolResult(m.Result)
	if !r.IsError || r.Text() != "hello" {
		t.Fatalf("%+v", r)
	}
	if got := r.ReplaceText("cut"); !bytes.Contains(got, []byte(`"text":"cut"`)) {
		t.Fatalf("%s", got)
	}
	e := ErrorMessage(nil, CodeParseError, "bad", nil)
	if string(e) != `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}` {
		t.Fatalf("%s", e)
	}
}
