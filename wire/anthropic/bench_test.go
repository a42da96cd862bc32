package anthropic

import (
	"strconv"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
)

// largeRequest builds a ~200 KB agent history: many tool turns with long
// tool_result blocks full of escapes, as a coding agent sends.
func largeRequest(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":8192,"stream":true,"system":"You are a coding agent.\nUse the tools.",`)
	b.WriteString(`"tools":[{"name":"read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}],`)
	b.WriteString(`"messages":[{"role":"user","content":"Fix the failing test in ./pkg."}`)
	line := `func f(x int) int {\n\treturn x * 2 // \"doubled\"\n}\n`
	for i := 0; b.Len() < size; i++ {
		id := "toolu_" + strconv.Itoa(1000000+i)
		b.WriteString(`,{"role":"assistant","content":[{"type":"text","text":"Reading file number ` + strconv.Itoa(i) + `.\n"},{"type":"tool_use","id":"` + id + `","name":"read_file","input":{"path":"pkg/f` + strconv.Itoa(i) + `.go"}}]}`)
		b.WriteString(`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"`)
		for range 60 {
			b.WriteString(line)
		}
		b.WriteString(`"}]}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func benchParse(b *testing.B, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := (Messages{}).ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRequest2KB(b *testing.B) {
	benchParse(b, fixture(b, "request-tool-result.json")) // 2,984 bytes
}

func BenchmarkParseRequest200KB(b *testing.B) {
	body := largeRequest(200 << 10)
	if req, err := (Messages{}).ParseRequest(body); err != nil || len(req.ToolResults) != 1 || req.Messages < 50 {
		b.Fatalf("generated request reads as %+v, %v", req, err)
	}
	benchParse(b, body)
}

func BenchmarkPrepareUpstream200KB(b *testing.B) {
	body := largeRequest(200 << 10)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Messages{}.PrepareUpstream(body, nil, 1024)
	}
}

// BenchmarkPrepareUpstream200KBParsed is the pipeline's case: the request
// its ParseRequest read comes along, so the history is not read again.
func BenchmarkPrepareUpstream200KBParsed(b *testing.B) {
	body := largeRequest(200 << 10)
	req, err := Messages{}.ParseRequest(body)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Messages{}.PrepareUpstream(body, &req, 1024)
	}
}

// BenchmarkTapFeed measures one Feed per SSE event of a text stream, the
// common case; ns/op and allocs/op are per chunk.
func BenchmarkTapFeed(b *testing.B) {
	chunk := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello,\\n \\\"world\\\" and more words\"}}\n\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	tap := Messages{}.NewStreamTap(&wire.Request{Stream: true})
	tap.Feed([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"))
	n := 0
	for b.Loop() {
		tap.Feed(chunk)
		if n++; n%10000 == 0 {
			// Keep the text buffer from growing without bound, as a
			// 64K-token answer would not.
			tap = Messages{}.NewStreamTap(&wire.Request{Stream: true})
		}
	}
}

// BenchmarkTapFeedToolArgs feeds input_json_delta chunks, which always
// carry escapes, cut in two so the splitter holds half an event each time.
func BenchmarkTapFeedToolArgs(b *testing.B) {
	ev := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"locati\"}}\n\n")
	half := len(ev) / 2
	b.ReportAllocs()
	tap := Messages{}.NewStreamTap(&wire.Request{Stream: true})
	tap.Feed([]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n"))
	n := 0
	for b.Loop() {
		tap.Feed(ev[:half])
		tap.Feed(ev[half:])
		if n++; n%10000 == 0 {
			tap = Messages{}.NewStreamTap(&wire.Request{Stream: true})
			tap.Feed([]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n"))
		}
	}
}

// BenchmarkParseResponse is the settlement's read of a Messages answer: a
// tool use (the common answer of an agent step) and a final text answer.
func BenchmarkParseResponse(b *testing.B) {
	for _, bc := range []struct{ name, body string }{
		{"tool-use", `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Looking up the orders."},{"type":"tool_use","id":"toolu_01","name":"search_orders","input":{"page":3}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":900,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":18,"service_tier":"standard"}}`},
		{"text", `{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"The three open orders of customer 4711 are A-1001, A-1002 and A-1007; all shipped."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1000,"output_tokens":20}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (Messages{}).ParseResponse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
