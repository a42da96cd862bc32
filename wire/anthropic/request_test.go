package anthropic

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/wire"
)

func fixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// familyText is the assistant text shared by request-tool-result.json (as
// history) and response-parallel-tool-use.json (as the answer).
const familyText = "I'll help you find out who is the youngest by retrieving information about each family member. I'll retrieve their entity information to compare their ages."

func TestParseRequest(t *testing.T) {
	t.Parallel()
	type result struct {
		CallID, Content string
		IsError         bool
	}
	tests := []struct {
		desc        string
		body        string
		want        wire.Request // BodyBytes, API and ToolResults are checked apart
		wantResults []result
	}{
		{
			desc: "fixture with four tool results",
			body: string(fixture(t, "request-tool-result.json")),
			want: wire.Request{
				Model: "claude-haiku-4-5", MaxOutputTokens: 4096, HasTools: true, Messages: 3,
				LastAssistantToolCallIDs: []string{"toolu_0167cfEnoQaPviGdVXA95zcu", "toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "toolu_01XFyAjstT3966qvRynZyVPo", "toolu_013mnQZbgtK2oe3Mo3XKJsx3"},
				LastAssistantTextHash:    wire.TextHash(familyText),
			},
			wantResults: []result{
				{"toolu_0167cfEnoQaPviGdVXA95zcu", "alice is bob's wife", false},
				{"toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "bob is alice's husband", false},
				{"toolu_01XFyAjstT3966qvRynZyVPo", "charlie is alice's son", false},
				{"toolu_013mnQZbgtK2oe3Mo3XKJsx3", "daisy is bob's daughter and charlie's younger sister", false},
			},
		},
		{
			desc: "first turn, string content",
			body: `{"model":"m","max_tokens":10,"stream":true,"tools":[],"messages":[{"role":"user","content":"hi"}]}`,
			want: wire.Request{Model: "m", Stream: true, MaxOutputTokens: 10, Messages: 1, NewUserTurn: true},
		},
		{
			desc: "no assistant and no user text is still a new task",
			body: `{"model":"m","messages":[]}`,
			want: wire.Request{Model: "m", NewUserTurn: true},
		},
		{
			desc: "new user text after a final answer",
			body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":" Done.\n"},{"role":"user","content":[{"type":"text","text":"next"}]}]}`,
			want: wire.Request{Model: "m", Messages: 3, NewUserTurn: true, LastAssistantTextHash: wire.TextHash("Done.")},
		},
		{
			desc: "assistant text blocks concatenated, escapes decoded",
			body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"line\none \u00e9 "},{"type":"thinking","thinking":"x"},{"type":"text","text":"\"two\""},{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"a\tb"},{"type":"text","text":"c"}]},{"type":"text","text":"also this"}]}]}`,
			want: wire.Request{
				Model: "m", Messages: 3, NewUserTurn: true,
				LastAssistantToolCallIDs: []string{"t1"},
				LastAssistantTextHash:    wire.TextHash("line\none é \"two\""),
			},
			wantResults: []result{{"t1", "a\tbc", true}},
		},
		{
			desc: "tool result with an image stays raw JSON; escaped string content decoded",
			body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},{"type":"tool_result","tool_use_id":"t2","content":"x\ny"}]}]}`,
			want: wire.Request{
				Model: "m", Messages: 3,
				LastAssistantToolCallIDs: []string{"t1", "t2"},
			},
			wantResults: []result{
				{"t1", `[{"type":"text","text":"see"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]`, false},
				{"t2", "x\ny", false},
			},
		},
		{
			desc: "only tool results after the last assistant of several",
			body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"old","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"old","content":"o"}]},{"role":"assistant","content":[{"type":"tool_use","id":"new","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"new"}]}]}`,
			want: wire.Request{
				Model: "m", Messages: 5,
				LastAssistantToolCallIDs: []string{"new"},
			},
			wantResults: []result{{"new", "", false}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			got, err := Messages{}.ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			if got.API != wire.APIMessages || got.BodyBytes != len(body) {
				t.Errorf("API %v BodyBytes %d, want %v %d", got.API, got.BodyBytes, wire.APIMessages, len(body))
			}
			var results []result
			for _, r := range got.ToolResults {
				results = append(results, result{r.CallID, string(r.Content), r.IsError})
			}
			if !slices.Equal(results, tc.wantResults) {
				t.Errorf("ToolResults = %+v, want %+v", results, tc.wantResults)
			}
			got.API, got.BodyBytes, got.ToolResults = 0, 0, nil
			got.LastAssistantPrefixHash, got.ConversationHash = 0, 0 // pipeline.TestTextLineageIsPerConversation
			if !equalRequest(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// equalRequest compares what ParseRequest reads; the layout is the codec's
// own note for PrepareUpstream, checked by the tests of the edits, and the
// tools are read by TestPrepareUpstreamSerialTools.
func equalRequest(a, b wire.Request) bool {
	a.Layout, b.Layout = wire.Layout{}, wire.Layout{}
	a.Tools, b.Tools = "", ""
	return reflect.DeepEqual(a, b)
}

func TestParseRequestRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		body string
		want error
	}{
		{"empty", ``, ErrNotObject},
		{"array", `[{"model":"m","messages":[]}]`, ErrNotObject},
		{"truncated", `{"model":"m","messages":[`, ErrNotObject},
		{"no model", `{"messages":[]}`, ErrNoModel},
		{"model not a string", `{"model":1,"messages":[]}`, ErrNoModel},
		{"no messages", `{"model":"m"}`, ErrNoMessages},
		{"messages not an array", `{"model":"m","messages":{}}`, ErrNoMessages},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if _, err := (Messages{}).ParseRequest([]byte(tc.body)); err != tc.want {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// The strings a Request keeps must not change when the caller reuses the
// body buffer (fasthttp does).
func TestParseRequestCopiesStrings(t *testing.T) {
	t.Parallel()
	body := fixture(t, "request-tool-result.json")
	req, err := Messages{}.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if req.Model != "claude-haiku-4-5" || req.LastAssistantToolCallIDs[0] != "toolu_0167cfEnoQaPviGdVXA95zcu" || req.ToolResults[3].CallID != "toolu_013mnQZbgtK2oe3Mo3XKJsx3" {
		t.Errorf("strings changed with the body: %q %q", req.Model, req.LastAssistantToolCallIDs)
	}
}

const toolDefs = `"tools":[{"name":"delete_file","input_schema":{"type":"object"}}]`

func TestPrepareUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		body      string
		maxOutput int64
		want      string // "" when the body must come back as the same slice
		serial    bool   // the pipeline asks for one tool call at a time
	}{
		{"no cap", `{"model":"m","max_tokens":9000,"messages":[]}`, 0, "", false},
		{"already below", `{"model":"m","max_tokens":100,"messages":[]}`, 500, "", false},
		{"equal", `{"model":"m","max_tokens":500,"messages":[]}`, 500, "", false},
		{"lowered", `{"model":"m","max_tokens":9000,"messages":[]}`, 500, `{"model":"m","max_tokens":500,"messages":[]}`, false},
		{"set when missing", `{"model":"m","messages":[]}`, 500, `{"model":"m","messages":[],"max_tokens":500}`, false},
		{"thinking budget halved", `{"model":"m","max_tokens":9000,"thinking":{"type":"enabled","budget_tokens":8000},"messages":[]}`, 4000,
			`{"model":"m","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[]}`, false},
		{"thinking dropped below its minimum", `{"model":"m","max_tokens":9000,"thinking":{"type":"enabled","budget_tokens":8000},"messages":[]}`, 1500,
			`{"model":"m","max_tokens":1500,"messages":[]}`, false},
		{"thinking budget already fits", `{"model":"m","max_tokens":9000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[]}`, 4000,
			`{"model":"m","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[]}`, false},
		{"serial without tool_choice", `{"model":"m","max_tokens":10,"messages":[],` + toolDefs + `}`, 0,
			`{"model":"m","max_tokens":10,"messages":[],` + toolDefs + `,"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`, true},
		{"serial keeps the choice's type", `{"model":"m","max_tokens":10,"messages":[],` + toolDefs + `,"tool_choice":{"type":"any"}}`, 0,
			`{"model":"m","max_tokens":10,"messages":[],` + toolDefs + `,"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`, true},
		{"serial already", `{"model":"m","max_tokens":10,"messages":[],` + toolDefs + `,"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`, 0, "", true},
		{"serial with choice none", `{"model":"m","max_tokens":10,"messages":[],` + toolDefs + `,"tool_choice":{"type":"none"}}`, 0, "", true},
		{"serial without tools", `{"model":"m","max_tokens":10,"messages":[]}`, 0, "", true},
		{"serial and capped", `{"model":"m","max_tokens":9000,"messages":[],` + toolDefs + `}`, 500,
			`{"model":"m","max_tokens":500,"messages":[],` + toolDefs + `,"tool_choice":{"type":"auto","disable_parallel_tool_use":true}}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			var req *wire.Request
			if tc.serial {
				r, err := Messages{}.ParseRequest(body)
				if err != nil {
					t.Fatal(err)
				}
				r.SerialTools = true
				req = &r
			}
			got, err := Messages{}.PrepareUpstream(body, req, tc.maxOutput)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.body {
				t.Fatalf("input body was modified: %s", body)
			}
			if tc.want == "" {
				if &got[0] != &body[0] || len(got) != len(body) {
					t.Errorf("got a new body %s, want the same slice", got)
				}
				return
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

const instruction = "Give your best conclusion from what you have; list what is unfinished."

func TestWrapUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		body      string
		maxOutput int64
		wantLast  string // raw JSON of the last message's content
		wantMsgs  int
		wantText  []string // in the flattened history
	}{
		{
			desc: "fixture: text after four tool results, tool blocks flattened",
			body: string(fixture(t, "request-tool-result.json")), maxOutput: 300,
			wantMsgs: 3, wantText: []string{"[called tool ", "[result of tool call "},
		},
		{
			desc: "tool blocks of every kind become text",
			body: `{"model":"m","max_tokens":5000,"tools":[{"name":"read","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"},"messages":[` +
				`{"role":"user","content":"go"},` +
				`{"role":"assistant","content":[{"type":"text","text":"reading"},{"type":"tool_use","id":"toolu_1","name":"read","input":{"page":1}},{"type":"tool_use","id":"toolu_2","name":"read","input":{"page":2}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"page one"},` +
				`{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"no page"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}]}`,
			maxOutput: 300, wantMsgs: 3,
			wantLast: `[{"type":"text","text":"[result of tool call toolu_1]\npage one"},{"type":"text","text":"[result of tool call toolu_2, an error]\nno page\n(image omitted)"},{"type":"text","text":"` + instruction + `"}]`,
			wantText: []string{`"reading"`, `[called tool read (toolu_1) with input {\"page\":1}]`, `[called tool read (toolu_2) with input {\"page\":2}]`},
		},
		{
			desc:      "string content becomes blocks",
			body:      `{"model":"m","max_tokens":5000,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"what \"now\"?"}]}`,
			maxOutput: 300, wantMsgs: 1,
			wantLast: `[{"type":"text","text":"what \"now\"?"},{"type":"text","text":"` + instruction + `"}]`,
		},
		{
			desc: "blank string content is replaced",
			body: `{"model":"m","messages":[{"role":"user","content":"  "}]}`, maxOutput: 300, wantMsgs: 1,
			wantLast: `[{"type":"text","text":"` + instruction + `"}]`,
		},
		{
			desc: "after an assistant message a new user message",
			body: `{"model":"m","max_tokens":4000,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"partial"}]}`, maxOutput: 300, wantMsgs: 3,
			wantLast: `[{"type":"text","text":"` + instruction + `"}]`,
		},
		{
			desc: "empty history",
			body: `{"model":"m","messages":[]}`, maxOutput: 300, wantMsgs: 1,
			wantLast: `[{"type":"text","text":"` + instruction + `"}]`,
		},
		{
			desc:      "thinking budget kept under the cap",
			body:      `{"model":"m","max_tokens":8000,"thinking":{"type":"enabled","budget_tokens":6000},"messages":[{"role":"user","content":[{"type":"text","text":"q"}]}]}`,
			maxOutput: 300, wantMsgs: 1,
			wantLast: `[{"type":"text","text":"q"},{"type":"text","text":"` + instruction + `"}]`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			out, err := Messages{}.WrapUp(body, nil, instruction, tc.maxOutput)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.body {
				t.Fatal("input body was modified")
			}
			checkValidHistory(t, out)
			root := gjson.ParseBytes(out)
			if root.Get("tools").Exists() || root.Get("tool_choice").Exists() {
				t.Errorf("tools or tool_choice left in %s", out)
			}
			for _, want := range tc.wantText {
				if !strings.Contains(root.Get("messages").Raw, want) {
					t.Errorf("%s missing from %s", want, root.Get("messages").Raw)
				}
			}
			if got := root.Get("max_tokens").Int(); got != tc.maxOutput {
				t.Errorf("max_tokens %d, want %d", got, tc.maxOutput)
			}
			if root.Get("thinking.budget_tokens").Int() >= tc.maxOutput && root.Get("thinking").Exists() {
				t.Errorf("thinking %s does not fit max_tokens %d", root.Get("thinking").Raw, tc.maxOutput)
			}
			msgs := root.Get("messages").Array()
			if len(msgs) != tc.wantMsgs {
				t.Fatalf("%d messages, want %d", len(msgs), tc.wantMsgs)
			}
			last := msgs[len(msgs)-1].Get("content")
			if tc.wantLast != "" && last.Raw != tc.wantLast {
				t.Errorf("last content\n got  %s\n want %s", last.Raw, tc.wantLast)
			}
			blocks := last.Array()
			if b := blocks[len(blocks)-1]; b.Get("type").Str != "text" || b.Get("text").Str != instruction {
				t.Errorf("last block %s, want the instruction", b.Raw)
			}
			// The wrap-up request reads as a new user turn of the same run.
			req, err := Messages{}.ParseRequest(out)
			if err != nil || !req.NewUserTurn || req.MaxOutputTokens != tc.maxOutput {
				t.Errorf("ParseRequest(wrap-up) = %+v, %v", req, err)
			}
		})
	}
}

// checkValidHistory checks what Anthropic validates of a history: JSON, a
// first user message, strict alternation, every tool_use answered at the
// start of the next message, tools defined when tool blocks appear, and no
// blank text block.
func checkValidHistory(t *testing.T, body []byte) {
	t.Helper()
	if !gjson.ValidBytes(body) {
		t.Fatalf("invalid JSON: %s", body)
	}
	root := gjson.ParseBytes(body)
	msgs := root.Get("messages").Array()
	var pending []string
	toolBlocks := false
	for i, m := range msgs {
		role := m.Get("role").Str
		if want := [2]string{"user", "assistant"}[i%2]; role != want {
			t.Fatalf("message %d is %q, want %q: %s", i, role, want, body)
		}
		blocks := m.Get("content").Array()
		if m.Get("content").Type == gjson.String {
			blocks = nil
		}
		for j, b := range blocks {
			switch b.Get("type").Str {
			case "text":
				if strings.TrimSpace(b.Get("text").Str) == "" {
					t.Errorf("message %d block %d: blank text", i, j)
				}
			case "tool_use":
				toolBlocks = true
				pending = append(pending, b.Get("id").Str)
			case "tool_result":
				toolBlocks = true
				if j >= len(pending) || !slices.Contains(pending, b.Get("tool_use_id").Str) {
					t.Errorf("message %d block %d: tool_result not at the start or unmatched", i, j)
				}
			}
		}
		if role == "user" {
			n := 0
			for _, b := range blocks {
				if b.Get("type").Str == "tool_result" {
					n++
				}
			}
			if n != len(pending) {
				t.Errorf("message %d answers %d of %d tool_use blocks", i, n, len(pending))
			}
			pending = pending[:0]
		}
	}
	if toolBlocks && len(root.Get("tools").Array()) == 0 {
		t.Errorf("history has tool blocks but no tools are defined")
	}
}

func TestWrapUpRejects(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, `[]`, `{"model":"m"}`, `{"model":"m","messages":`} {
		if out, err := (Messages{}).WrapUp([]byte(body), nil, instruction, 10); err == nil {
			t.Errorf("WrapUp(%q) = %s, want an error", body, out)
		}
	}
}

// max_tokens is a positive integer within wire.MaxOutputCap, and a body
// nests at most jsonscan.MaxDepth levels: the gateway reserves on the cap,
// and readers after its own scan recurse.
func TestParseRequestValidatesLimits(t *testing.T) {
	t.Parallel()
	body := func(member string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],` + member + `}`)
	}
	for _, v := range []string{"-5", "0", "2.5", `"abc"`, "1e12", "1e99", "1000000000000", "10000001", "1.0", "true"} {
		t.Run("max_tokens="+v, func(t *testing.T) {
			t.Parallel()
			if _, err := (Messages{}).ParseRequest(body(`"max_tokens":` + v)); err == nil || !strings.Contains(err.Error(), "max_tokens must be a positive integer") {
				t.Fatalf("err = %v, want the cap refused", err)
			}
		})
	}
	for _, v := range []string{"1", "4096", "10000000"} {
		req, err := (Messages{}).ParseRequest(body(`"max_tokens":` + v))
		if want, _ := strconv.ParseInt(v, 10, 64); err != nil || req.MaxOutputTokens != want {
			t.Fatalf("max_tokens %s: cap %d, %v", v, req.MaxOutputTokens, err)
		}
	}
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	for desc, b := range map[string][]byte{
		"tools":           body(`"max_tokens":10,"tools":` + deep),
		"metadata":        body(`"max_tokens":10,"metadata":{"a":` + deep + `}`),
		"message content": []byte(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":` + deep + `}]}`),
		"last assistant":  []byte(`{"model":"m","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"tool_use","input":` + deep + `}]}]}`),
	} {
		if _, err := (Messages{}).ParseRequest(b); !errors.Is(err, wire.ErrTooDeep) {
			t.Fatalf("deep %s: err = %v, want wire.ErrTooDeep", desc, err)
		}
	}
}
