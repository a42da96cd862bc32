package proxy

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
	"github.com/haltline/haltline/wire/sse"
)

// A fast upstream's whole stream arrives in one read: its first event goes
// to the client alone, at once, what follows up to the terminal event next,
// and only the terminal event waits for the call to be settled.
func TestStreamBodyCutsAReadForTheFirstAndTerminalEvents(t *testing.T) {
	t.Parallel()
	fixture := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// A fixture may end without the blank line a live stream ends with.
		return strings.TrimRight(string(b), "\n") + "\n\n"
	}
	chat := fixture("../wire/openai/testdata/chat/stream-text-include-usage.sse")
	messages := fixture("../wire/anthropic/testdata/stream-tool-use.sse")
	for _, tc := range []struct {
		desc     string
		tap      wire.StreamTap
		stream   string
		terminal string // what must wait for the settlement
	}{
		{"openai chat", openai.Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: true}), chat, "data: [DONE]\n\n"},
		{"anthropic", anthropic.Messages{}.NewStreamTap(nil), messages, messages[strings.LastIndex(messages, "event: message_stop"):]},
		{"only the terminal event", openai.Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: true}), "data: [DONE]\n\n", "data: [DONE]\n\n"},
		// Before a terminal event, only \n framing is cut: with \r\n, what
		// follows the first event waits with it.
		{"crlf", openai.Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: true}),
			"data: {\"choices\":[]}\r\n\r\ndata: {\"choices\":[]}\r\n\r\ndata: [DONE]\r\n\r\n", "data: {\"choices\":[]}\r\n\r\ndata: [DONE]\r\n\r\n"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			var got bytes.Buffer
			settledAt, settles := -1, 0
			buf := make([]byte, 64<<10)
			b := &streamBody{
				up: io.NopCloser(strings.NewReader(tc.stream)), t: tc.tap, buf: &buf,
				settle: func(pipeline.Outcome) {
					if settles++; settles == 1 {
						settledAt = got.Len()
					}
				},
				done: func() {},
			}
			p := make([]byte, 64<<10)
			first := -1
			for {
				n, err := b.Read(p)
				if first < 0 {
					first = n
				}
				got.Write(p[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if got.String() != tc.stream {
				t.Fatalf("client got %q, want the upstream's bytes", got.String())
			}
			if want := len(tc.stream) - len(tc.terminal); settledAt != want {
				t.Fatalf("settled after %d bytes went out, want %d (all but the terminal event)", settledAt, want)
			}
			if want := sse.FirstEventEnd([]byte(tc.stream)); first != want {
				t.Fatalf("first write %d bytes, want the first event's %d", first, want)
			}
		})
	}
}
