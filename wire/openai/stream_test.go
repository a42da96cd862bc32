package openai

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/haltline/haltline/wire"
)

// The usage event of stream-text-include-usage.sse, the one the strip removes.
func usageEvent(t *testing.T, stream []byte) []byte {
	t.Helper()
	var found []byte
	for _, ev := range eventsOf(stream) {
		if bytes.Contains(ev, []byte(`"choices":[],"usage":{`)) {
			if found != nil {
				t.Fatal("two usage events")
			}
			found = ev
		}
	}
	if found == nil {
		t.Fatal("no usage event")
	}
	return found
}

func TestChatTapStripsInjectedUsage(t *testing.T) {
	t.Parallel()
	for _, file := range []string{
		"chat/stream-text-include-usage.sse",
		"chat/stream-parallel-tool-calls.sse",
		"chat/stream-parallel-tool-calls-2024.sse",
	} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			in := fixture(t, file)
			usage := usageEvent(t, in)
			want := bytes.Replace(in, usage, nil, 1)
			if len(want) != len(in)-len(usage) {
				t.Fatal("bad reference")
			}
			r := rand.New(rand.NewPCG(7, 7))
			for i := range 400 {
				var cuts []int
				switch {
				case i == 1:
					// One byte at a time.
					for c := 1; c < len(in); c++ {
						cuts = append(cuts, c)
					}
				case i > 1:
					cuts = randomCuts(r, len(in), 1+r.IntN(700))
				}
				stripped := Chat{}.NewStreamTap(&wire.Request{Stream: true})
				if got := feedCuts(stripped, in, cuts); !bytes.Equal(got, want) {
					t.Fatalf("cuts %v: strip output differs\n got %q\nwant %q", cuts, got, want)
				}
				if u := stripped.Response().Usage; u.InputTokens == 0 {
					t.Fatalf("usage not read while stripping: %+v", u)
				}
				kept := Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: true})
				if got := feedCuts(kept, in, cuts); !bytes.Equal(got, in) {
					t.Fatalf("cuts %v: include_usage client got %q", cuts, got)
				}
			}
		})
	}
}

// A pass-through chunk comes back as the very same slice, and a chunk of
// whole events in strip mode aliases it as well.
func TestChatTapAliasesChunks(t *testing.T) {
	t.Parallel()
	in := fixture(t, "chat/stream-text-include-usage.sse")
	evs := eventsOf(in)
	tests := []struct {
		desc  string
		strip bool
	}{
		{"pass through", false},
		{"strip mode", true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tap := Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: !tc.strip})
			for _, ev := range evs {
				out := tap.Feed(ev)
				if bytes.Contains(ev, []byte(`"choices":[]`)) && tc.strip {
					if len(out) != 0 {
						t.Fatalf("usage event passed: %q", out)
					}
					continue
				}
				if len(out) != len(ev) || &out[0] != &ev[0] {
					t.Fatalf("event copied or changed: %q", out)
				}
			}
		})
	}
}

func TestChatTapUnterminatedTail(t *testing.T) {
	t.Parallel()
	in := fixture(t, "chat/stream-text-include-usage.sse")
	usage := usageEvent(t, in)
	// The stream ends right after the usage event, without its blank line.
	cut := bytes.Index(in, usage) + len(usage) - 2
	tap := Chat{}.NewStreamTap(&wire.Request{Stream: true})
	got := feedCuts(tap, in[:cut], []int{100})
	if want := in[:bytes.Index(in, usage)]; !bytes.Equal(got, want) {
		t.Fatalf("got %q", got)
	}
	if tap.Response().Usage.InputTokens != 14 {
		t.Fatal("usage in the unterminated tail not read")
	}
}

func TestChatTapMultiLineDataAndCRLF(t *testing.T) {
	t.Parallel()
	in := fixture(t, "chat/stream-text-include-usage.sse")
	crlf := bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n"))
	usage := usageEvent(t, crlf)
	tap := Chat{}.NewStreamTap(&wire.Request{Stream: true})
	got := feedCuts(tap, crlf, []int{5, 900, 901, 2000})
	if want := bytes.Replace(crlf, usage, nil, 1); !bytes.Equal(got, want) {
		t.Fatalf("crlf strip differs")
	}
	if r := tap.Response(); r.Text != "The capital of Mexico is Mexico City." {
		t.Fatalf("text %q", r.Text)
	}
}

func TestTapTextHead(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", wire.TextKeep) // 2 bytes each
	var stream []byte
	for i := 0; i < len(long); i += 100 {
		stream = append(stream, `data: {"choices":[{"index":0,"delta":{"content":"`...)
		stream = append(stream, long[i:min(i+100, len(long))]...)
		stream = append(stream, "\"}}]}\n\n"...)
	}
	tap := Chat{}.NewStreamTap(&wire.Request{Stream: true, IncludeUsage: true})
	feedCuts(tap, stream, []int{333, 777})
	r := tap.Response()
	if len(r.Text) != wire.TextKeep || !strings.HasPrefix(long, r.Text) {
		t.Fatalf("head %d bytes", len(r.Text))
	}
	if r.TextHash != wire.TextHash(long) {
		t.Fatal("hash of the whole text differs")
	}
}
