package wire_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
	"github.com/haltline/haltline/wire/sse"
)

// A tap's Terminal names exactly the event whose reading makes it Done: the
// front end holds back that event, and only it, until the call is settled.
func TestTerminalIsTheEventThatEndsTheStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		codec   wire.Codec
		fixture string
		stream  bool // the client asked for a stream without usage (the tap strips)
	}{
		{openai.Chat{}, "openai/testdata/chat/stream-text-include-usage.sse", true},
		{openai.Chat{}, "openai/testdata/chat/stream-parallel-tool-calls.sse", false},
		{openai.Chat{}, "openai/testdata/chat/stream-parallel-tool-calls-2024.sse", true},
		{openai.Responses{}, "openai/testdata/responses/stream-function-call.sse", false},
		{openai.Responses{}, "openai/testdata/responses/stream-function-call-2025-03.sse", false},
		{anthropic.Messages{}, "anthropic/testdata/stream-tool-use.sse", false},
		{anthropic.Messages{}, "anthropic/testdata/stream-text-padded.sse", false},
		{anthropic.Messages{}, "anthropic/testdata/stream-error-overloaded.sse", false},
	} {
		t.Run(filepath.Base(tc.fixture), func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(tc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			// A fixture may end without the blank line a live stream ends with.
			body = append(bytes.TrimRight(body, "\n"), "\n\n"...)
			var events [][]byte
			var split sse.Splitter
			split.Feed(body, func(ev []byte) { events = append(events, append([]byte(nil), ev...)) })
			tap := tc.codec.NewStreamTap(&wire.Request{Stream: tc.stream})
			terminals := 0
			for i, ev := range events {
				terminal := tap.Terminal(ev)
				was := tap.Done()
				tap.Feed(ev)
				if ended := !was && tap.Done(); terminal != ended {
					t.Fatalf("event %d %q: Terminal %v, but reading it ended the stream: %v", i, ev, terminal, ended)
				}
				if terminal {
					terminals++
				}
			}
			if terminals != 1 {
				t.Fatalf("%d terminal events, want 1", terminals)
			}
		})
	}
	// Lookalikes are not terminal.
	for _, tc := range []struct {
		codec wire.Codec
		event string
	}{
		{openai.Chat{}, `data: {"choices":[{"delta":{"content":"[DONE]"}}]}` + "\n\n"},
		{openai.Chat{}, ": [DONE]\n\n"},
		{openai.Responses{}, "event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","delta":"response.completed"}` + "\n\n"},
		{anthropic.Messages{}, "event: content_block_delta\n" + `data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"message_stop"}}` + "\n\n"},
	} {
		if tc.codec.NewStreamTap(&wire.Request{}).Terminal([]byte(tc.event)) {
			t.Errorf("%s: %q read as terminal", tc.codec.API(), strings.TrimSpace(tc.event))
		}
	}
}
