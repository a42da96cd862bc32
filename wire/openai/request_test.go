package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
)

type wantReq struct {
	model        string
	stream       bool
	includeUsage bool
	maxOut       int64
	hasTools     bool
	prev         string
	ids          []string
	textHash     uint64
	newUser      bool
	results      []wire.ToolResult
	messages     int
}

func checkReq(t *testing.T, got wire.Request, w wantReq) {
	t.Helper()
	if got.Model != w.model || got.Stream != w.stream || got.IncludeUsage != w.includeUsage ||
		got.MaxOutputTokens != w.maxOut || got.HasTools != w.hasTools || got.PreviousResponseID != w.prev {
		t.Errorf("got model %q stream %v usage %v max %d tools %v prev %q; want %+v",
			got.Model, got.Stream, got.IncludeUsage, got.MaxOutputTokens, got.HasTools, got.PreviousResponseID, w)
	}
	if !slices.Equal(got.LastAssistantToolCallIDs, w.ids) {
		t.Errorf("ids = %q, want %q", got.LastAssistantToolCallIDs, w.ids)
	}
	if got.LastAssistantTextHash != w.textHash {
		t.Errorf("text hash = %x, want %x", got.LastAssistantTextHash, w.textHash)
	}
	if got.NewUserTurn != w.newUser {
		t.Errorf("new user turn = %v, want %v", got.NewUserTurn, w.newUser)
	}
	if got.Messages != w.messages {
		t.Errorf("messages = %d, want %d", got.Messages, w.messages)
	}
	if len(got.ToolResults) != len(w.results) {
		t.Fatalf("results = %+v, want %+v", got.ToolResults, w.results)
	}
	for i, r := range w.results {
		g := got.ToolResults[i]
		if g.CallID != r.CallID || string(g.Content) != string(r.Content) {
			t.Errorf("result %d = {%s %q}, want {%s %q}", i, g.CallID, g.Content, r.CallID, r.Content)
		}
	}
}

func result(id, content string) wire.ToolResult {
	return wire.ToolResult{CallID: id, Content: []byte(content)}
}

func TestParseRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		codec wire.Codec
		body  []byte
		want  wantReq
	}{
		{
			desc: "chat tool roundtrip fixture", codec: Chat{}, body: fixture(t, "chat/request-tool-roundtrip.json"),
			want: wantReq{
				model: "gpt-4o", hasTools: true, messages: 5,
				ids: []string{"call_jYdIdRZHxZTn5bWCq5jlMrJi", "call_TmlTVWQbzrXCZ4jNsCVNbNqu"},
				results: []wire.ToolResult{
					result("call_jYdIdRZHxZTn5bWCq5jlMrJi", "true"),
					result("call_TmlTVWQbzrXCZ4jNsCVNbNqu", "Success"),
				},
			},
		},
		{
			desc: "chat first turn streaming", codec: Chat{},
			body: []byte(`{"model":"gpt-4o","stream":true,"max_tokens":50,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`),
			want: wantReq{model: "gpt-4o", stream: true, maxOut: 50, newUser: true, messages: 2},
		},
		{
			desc: "chat max_completion_tokens wins over max_tokens", codec: Chat{},
			body: []byte(`{"model":"m","max_tokens":50,"max_completion_tokens":70,"stream":true,"stream_options":{"include_usage":true},"messages":[]}`),
			want: wantReq{model: "m", stream: true, includeUsage: true, maxOut: 70, newUser: true},
		},
		{
			desc: "chat new question after a final answer with text parts", codec: Chat{},
			body: []byte(`{"model":"m","tools":[],"messages":[{"role":"user","content":"a"},` +
				`{"role":"assistant","content":[{"type":"text","text":"  Paris "},{"type":"text","text":"is it.\n"}]},` +
				`{"role":"user","content":[{"type":"text","text":"and Rome?"}]}]}`),
			want: wantReq{model: "m", textHash: wire.TextHash("Paris is it."), newUser: true, messages: 3},
		},
		{
			desc: "chat tool content as text parts with escapes", codec: Chat{},
			body: []byte(`{"model":"m","messages":[{"role":"user","content":"a"},` +
				`{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"content":[{"type":"text","text":"line\n\"1\""},{"type":"text","text":" \u00e9"}],"role":"tool","tool_call_id":"c1"}]}`),
			want: wantReq{
				model: "m", ids: []string{"c1"}, textHash: wire.TextHash("Let me look."), messages: 3,
				results: []wire.ToolResult{result("c1", "line\n\"1\" é")},
			},
		},
		{
			desc: "responses previous_response_id fixture", codec: Responses{},
			body: fixture(t, "responses/request-previous-response-id-function-call-output.json"),
			want: wantReq{
				model: "gpt-4.1", hasTools: true, messages: 1,
				prev:    "resp_0435eb6c2aa8e9eb0069e1600000608195818a61245c018620",
				results: []wire.ToolResult{result("call_N2BikjqNxghwNIwHl2XKfb0F", "Sunny, 72F")},
			},
		},
		{
			desc: "responses string input", codec: Responses{},
			body: []byte(`{"model":"gpt-5","input":"Tell me a joke","stream":true,"max_output_tokens":300}`),
			want: wantReq{model: "gpt-5", stream: true, maxOut: 300, newUser: true, messages: 1},
		},
		{
			desc: "responses stateless history", codec: Responses{},
			body: []byte(`{"model":"gpt-5","input":[` +
				`{"role":"user","content":"Capital of France?"},` +
				`{"type":"reasoning","id":"rs_1","summary":[]},` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},` +
				`{"type":"function_call","call_id":"call_a","name":"get_capital","arguments":"{}"},` +
				`{"type":"function_call","call_id":"call_b","name":"get_capital","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"call_a","output":"Paris"},` +
				`{"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"Lyon"}]}]}`),
			want: wantReq{
				model: "gpt-5", messages: 7, ids: []string{"call_a", "call_b"}, textHash: wire.TextHash("Checking."),
				results: []wire.ToolResult{result("call_a", "Paris"), result("call_b", "Lyon")},
			},
		},
		{
			desc: "responses easy assistant message then user", codec: Responses{},
			body: []byte(`{"model":"gpt-5","input":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"bye"}]}`),
			want: wantReq{model: "gpt-5", messages: 3, textHash: wire.TextHash("Hello!"), newUser: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got, err := tc.codec.ParseRequest(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if got.BodyBytes != len(tc.body) || got.API != tc.codec.API() {
				t.Errorf("body bytes %d api %v", got.BodyBytes, got.API)
			}
			checkReq(t, got, tc.want)
		})
	}
}

func TestParseRequestRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		codec wire.Codec
		body  string
	}{
		{"not json", Chat{}, `model=gpt`},
		{"array", Chat{}, `[{"model":"m"}]`},
		{"truncated", Chat{}, `{"model":"m","messages":[{"role":"user"`},
		{"no model", Chat{}, `{"messages":[]}`},
		{"model not a string", Chat{}, `{"model":5,"messages":[]}`},
		{"no messages", Chat{}, `{"model":"m"}`},
		{"messages not an array", Chat{}, `{"model":"m","messages":{}}`},
		{"duplicate cap", Chat{}, `{"model":"m","max_tokens":10,"messages":[],"max_tokens":100000}`},
		{"responses not json", Responses{}, `{"model":`},
		{"responses no model", Responses{}, `{"input":"hi"}`},
		{"responses duplicate input", Responses{}, `{"model":"m","input":"a","input":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if _, err := tc.codec.ParseRequest([]byte(tc.body)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// The parsed request must not change when the body buffer is reused.
func TestParseRequestDetachesStrings(t *testing.T) {
	t.Parallel()
	body := fixture(t, "chat/request-tool-roundtrip.json")
	req, err := Chat{}.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if req.Model != "gpt-4o" || req.LastAssistantToolCallIDs[0] != "call_jYdIdRZHxZTn5bWCq5jlMrJi" ||
		req.ToolResults[1].CallID != "call_TmlTVWQbzrXCZ4jNsCVNbNqu" {
		t.Fatalf("strings alias the body: %+v", req)
	}
}

const fnTools = `"tools":[{"type":"function","function":{"name":"delete_file","parameters":{}}}]`

func TestPrepareUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		codec     wire.Codec
		body      string
		maxOutput int64
		want      string // "" = the body itself, unchanged
		serial    bool   // the pipeline asks for one tool call at a time
	}{
		{"chat non-stream no cap", Chat{}, `{"model":"m","messages":[]}`, 0, "", false},
		{"chat stream client asked usage", Chat{}, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, 0, "", false},
		{
			"chat stream inject", Chat{}, `{"model":"m", "stream":true, "messages":[]}`, 0,
			`{"model":"m","stream":true,"messages":[],"stream_options":{"include_usage":true}}`, false,
		},
		{
			"chat stream options without usage", Chat{}, `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":false},"messages":[]}`, 0,
			`{"model":"m","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"messages":[]}`, false,
		},
		{
			"chat cap sets max_completion_tokens", Chat{}, `{"model":"m","messages":[]}`, 500,
			`{"model":"m","messages":[],"max_completion_tokens":500}`, false,
		},
		{
			"chat cap lowers legacy max_tokens", Chat{}, `{"model":"m","max_tokens":4096,"messages":[]}`, 500,
			`{"model":"m","max_tokens":500,"messages":[]}`, false,
		},
		{"chat cap keeps a smaller value", Chat{}, `{"model":"m","max_tokens":100,"messages":[]}`, 500, "", false},
		{
			"chat cap replaces null", Chat{}, `{"model":"m","max_completion_tokens":null,"messages":[]}`, 500,
			`{"model":"m","max_completion_tokens":500,"messages":[]}`, false,
		},
		{
			"chat inject and cap", Chat{}, `{"model":"m","stream":true,"max_completion_tokens":9000,"messages":[]}`, 500,
			`{"model":"m","stream":true,"max_completion_tokens":500,"messages":[],"stream_options":{"include_usage":true}}`, false,
		},
		{"responses no cap", Responses{}, `{"model":"m","stream":true,"input":"x"}`, 0, "", false},
		{"responses smaller cap kept", Responses{}, `{"model":"m","input":"x","max_output_tokens":10}`, 500, "", false},
		{
			"responses cap", Responses{}, `{"model":"m","input":"x","max_output_tokens":10000}`, 500,
			`{"model":"m","input":"x","max_output_tokens":500}`, false,
		},
		{
			"responses cap set", Responses{}, `{"model":"m","input":"x"}`, 500,
			`{"model":"m","input":"x","max_output_tokens":500}`, false,
		},
		{"chat serial set", Chat{}, `{"model":"m","messages":[],` + fnTools + `}`, 0,
			`{"model":"m","messages":[],` + fnTools + `,"parallel_tool_calls":false}`, true},
		{"chat serial replaces true", Chat{}, `{"model":"m","messages":[],` + fnTools + `,"parallel_tool_calls":true}`, 0,
			`{"model":"m","messages":[],` + fnTools + `,"parallel_tool_calls":false}`, true},
		{"chat serial already false", Chat{}, `{"model":"m","messages":[],` + fnTools + `,"parallel_tool_calls":false}`, 0, "", true},
		{"chat serial without tools", Chat{}, `{"model":"m","messages":[]}`, 0, "", true},
		{"responses serial set", Responses{}, `{"model":"m","input":"x","tools":[{"type":"function","name":"d"}]}`, 0,
			`{"model":"m","input":"x","tools":[{"type":"function","name":"d"}],"parallel_tool_calls":false}`, true},
		{"responses serial already false", Responses{}, `{"model":"m","input":"x","parallel_tool_calls":false,"tools":[{"type":"function","name":"d"}]}`, 0, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			req, err := tc.codec.ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			req.SerialTools = tc.serial
			got, err := tc.codec.PrepareUpstream(body, &req, tc.maxOutput)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.body {
				t.Fatal("input body modified")
			}
			if tc.want == "" {
				if len(got) != len(body) || &got[0] != &body[0] {
					t.Fatalf("body not returned as is: %s", got)
				}
				return
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Fatal("invalid JSON")
			}
		})
	}
}

// chatHistoryValid checks what the API checks: every tool message answers a
// call of the assistant message before it, and every call is answered
// before the next non-tool message.
func chatHistoryValid(t *testing.T, msgs []map[string]any) {
	t.Helper()
	var open map[string]bool
	for i, m := range msgs {
		switch m["role"] {
		case "tool":
			id, _ := m["tool_call_id"].(string)
			if !open[id] {
				t.Fatalf("message %d: tool result %q answers no open call", i, id)
			}
			delete(open, id)
		default:
			if len(open) > 0 {
				t.Fatalf("message %d: calls %v left unanswered", i, open)
			}
			open = map[string]bool{}
			calls, _ := m["tool_calls"].([]any)
			for _, c := range calls {
				open[c.(map[string]any)["id"].(string)] = true
			}
		}
	}
}

func TestChatWrapUp(t *testing.T) {
	t.Parallel()
	const instr = "Give your best conclusion now.\nList what is unfinished."
	roundtrip := fixture(t, "chat/request-tool-roundtrip.json")
	// The same history with the second tool result missing.
	var m map[string]any
	if err := json.Unmarshal(roundtrip, &m); err != nil {
		t.Fatal(err)
	}
	m["messages"] = m["messages"].([]any)[:4]
	m["stream"] = true
	m["max_tokens"] = 4000
	partial, _ := json.Marshal(m)

	tests := []struct {
		desc       string
		body       []byte
		wantMsgs   int
		wantCapKey string
		wantUsage  bool
	}{
		{"tool roundtrip", roundtrip, 6, "max_completion_tokens", false},
		{"unanswered call, stream, legacy cap", partial, 6, "max_tokens", true},
		{"empty history", []byte(`{"model":"m","messages":[ ],"tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":true}`), 1, "max_completion_tokens", false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			orig := bytes.Clone(tc.body)
			req, err := Chat{}.ParseRequest(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Chat{}.WrapUp(tc.body, &req, instr, 256)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(tc.body, orig) {
				t.Fatal("input modified")
			}
			var got struct {
				Model         string           `json:"model"`
				Messages      []map[string]any `json:"messages"`
				Tools         any              `json:"tools"`
				ToolChoice    any              `json:"tool_choice"`
				Parallel      any              `json:"parallel_tool_calls"`
				StreamOptions map[string]any   `json:"stream_options"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("invalid JSON: %v\n%s", err, out)
			}
			var caps map[string]any
			_ = json.Unmarshal(out, &caps)
			if got.Tools != nil || got.ToolChoice != nil || got.Parallel != nil {
				t.Errorf("tools left: %s", out)
			}
			if len(got.Messages) != tc.wantMsgs {
				t.Fatalf("%d messages, want %d: %s", len(got.Messages), tc.wantMsgs, out)
			}
			last := got.Messages[len(got.Messages)-1]
			if last["role"] != "user" || last["content"] != instr {
				t.Errorf("last message %v", last)
			}
			chatHistoryValid(t, got.Messages)
			if caps[tc.wantCapKey] != float64(256) {
				t.Errorf("%s = %v", tc.wantCapKey, caps[tc.wantCapKey])
			}
			if tc.wantUsage != (got.StreamOptions["include_usage"] == true) {
				t.Errorf("stream_options %v", got.StreamOptions)
			}
			// The wrap-up is itself a valid request for the gateway.
			again, err := Chat{}.ParseRequest(out)
			if err != nil || again.HasTools || !again.NewUserTurn {
				t.Errorf("re-parse: %v %+v", err, again)
			}
			if p, _ := (Chat{}).PrepareUpstream(out, &req, 256); &p[0] != &out[0] {
				t.Errorf("wrap-up still needed preparing: %s", p)
			}
		})
	}
}

func TestResponsesWrapUp(t *testing.T) {
	t.Parallel()
	const instr = "Wrap up."
	tests := []struct {
		desc  string
		body  []byte
		items int
		first string // JSON of the first item's content, when checked
	}{
		{"previous_response_id fixture", fixture(t, "responses/request-previous-response-id-function-call-output.json"), 2, ""},
		{"string input", []byte(`{"model":"m","input":"Tell me about \"X\"","tools":[],"tool_choice":"auto"}`), 2, `"Tell me about \"X\""`},
		{"no input", []byte(`{"model":"m","previous_response_id":"resp_1"}`), 1, ""},
		{
			"unanswered function call", []byte(`{"model":"m","input":[{"role":"user","content":"q"},` +
				`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` +
				`{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"c1","output":"ok"}],"max_output_tokens":9000}`), 6, "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			req, err := Responses{}.ParseRequest(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Responses{}.WrapUp(tc.body, &req, instr, 128)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Input      []map[string]any `json:"input"`
				Tools      any              `json:"tools"`
				ToolChoice any              `json:"tool_choice"`
				MaxOutput  int              `json:"max_output_tokens"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("invalid: %v\n%s", err, out)
			}
			if got.Tools != nil || got.ToolChoice != nil || got.MaxOutput != 128 {
				t.Errorf("tools/cap: %s", out)
			}
			if len(got.Input) != tc.items {
				t.Fatalf("%d items, want %d: %s", len(got.Input), tc.items, out)
			}
			last, _ := json.Marshal(got.Input[len(got.Input)-1])
			if string(last) != `{"content":[{"text":"Wrap up.","type":"input_text"}],"role":"user","type":"message"}` {
				t.Errorf("last item %s", last)
			}
			if tc.first != "" {
				c, _ := json.Marshal(got.Input[0]["content"])
				if string(c) != tc.first || got.Input[0]["role"] != "user" {
					t.Errorf("first item %v", got.Input[0])
				}
			}
			// Every function call is answered.
			open := map[any]bool{}
			for _, it := range got.Input {
				switch it["type"] {
				case "function_call":
					open[it["call_id"]] = true
				case "function_call_output":
					delete(open, it["call_id"])
				}
			}
			if len(open) > 0 {
				t.Errorf("unanswered %v", open)
			}
		})
	}
}

// PrepareUpstream given the request of another body (a context rewrite)
// reads that body in full rather than trusting where the first one's
// values lay.
func TestPrepareUpstreamOtherBody(t *testing.T) {
	t.Parallel()
	parsed := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a long first message"}]}`)
	req, err := Chat{}.ParseRequest(parsed)
	if err != nil {
		t.Fatal(err)
	}
	// Same length, members moved: offsets noted for parsed mean nothing here.
	other := []byte(`{"messages":[{"role":"user","content":"a long first message"}],"model":"m","stream":true}`)
	if len(other) != len(parsed) {
		t.Fatal("test bodies differ in length")
	}
	got, err := Chat{}.PrepareUpstream(other, &req, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messages":[{"role":"user","content":"a long first message"}],"model":"m","stream":true,"stream_options":{"include_usage":true}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// An output cap is a positive integer within wire.MaxOutputCap, and a body
// nests at most jsonscan.MaxDepth levels: the gateway reserves on the cap,
// and readers after its own scan recurse.
func TestParseRequestValidatesLimits(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	type api struct {
		codec wire.Codec
		keys  []string
		body  func(member string) string
	}
	chat := api{Chat{}, []string{"max_tokens", "max_completion_tokens"}, func(m string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}],` + m + `}`
	}}
	responses := api{Responses{}, []string{"max_output_tokens"}, func(m string) string {
		return `{"model":"m","input":"hi",` + m + `}`
	}}
	for _, a := range []api{chat, responses} {
		for _, key := range a.keys {
			for _, v := range []string{"-5", "0", "2.5", `"abc"`, "1e12", "1e99", "1000000000000", "10000001", "1.0", "true", "[]"} {
				t.Run(a.codec.API().String()+"/"+key+"="+v, func(t *testing.T) {
					t.Parallel()
					_, err := a.codec.ParseRequest([]byte(a.body(`"` + key + `":` + v)))
					if err == nil || !strings.Contains(err.Error(), key+" must be a positive integer") {
						t.Fatalf("err = %v, want the cap refused", err)
					}
				})
			}
			for _, v := range []string{"1", "4096", "10000000", "null"} {
				t.Run(a.codec.API().String()+"/"+key+"="+v+"/accepted", func(t *testing.T) {
					t.Parallel()
					req, err := a.codec.ParseRequest([]byte(a.body(`"` + key + `":` + v)))
					want, _ := strconv.ParseInt(v, 10, 64)
					if err != nil || req.MaxOutputTokens != want {
						t.Fatalf("cap %d, %v; want %d", req.MaxOutputTokens, err, want)
					}
				})
			}
		}
		for _, member := range []string{`"tools":` + deep, `"metadata":{"a":` + deep + `}`} {
			t.Run(a.codec.API().String()+"/deep "+member[:8], func(t *testing.T) {
				t.Parallel()
				if _, err := a.codec.ParseRequest([]byte(a.body(member))); !errors.Is(err, wire.ErrTooDeep) {
					t.Fatalf("err = %v, want wire.ErrTooDeep", err)
				}
			})
		}
	}
	deepHistory := `{"model":"m","messages":[{"role":"user","content":` + deep + `}]}`
	if _, err := (Chat{}).ParseRequest([]byte(deepHistory)); !errors.Is(err, wire.ErrTooDeep) {
		t.Fatalf("deep message content: err = %v, want wire.ErrTooDeep", err)
	}
}

func TestToolNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		codec wire.Codec
		body  string
		want  string
	}{
		{Chat{}, `{"model":"m","messages":[],"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]}`, "a,b"},
		{Responses{}, `{"model":"m","input":"x","tools":[{"type":"function","name":"a"},{"type":"web_search"}]}`, "a,web_search"},
	} {
		req, err := tc.codec.ParseRequest([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(req.ToolNames(), ","); got != tc.want {
			t.Errorf("%s: tool names %q, want %q", tc.codec.API(), got, tc.want)
		}
	}
}
