package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

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
	chatTap := func() streamTurn {
		return tapTurn(openai.Chat{}, &wire.Request{Stream: true, IncludeUsage: true})
	}
	for _, tc := range []struct {
		desc     string
		tap      func() streamTurn
		stream   string
		terminal string // what must wait for the settlement
	}{
		{"openai chat", chatTap, chat, "data: [DONE]\n\n"},
		{"anthropic", func() streamTurn { return tapTurn(anthropic.Messages{}, &wire.Request{}) }, messages, messages[strings.LastIndex(messages, "event: message_stop"):]},
		{"only the terminal event", chatTap, "data: [DONE]\n\n", "data: [DONE]\n\n"},
		// Before a terminal event, only \n framing is cut: with \r\n, what
		// follows the first event waits with it.
		{"crlf", chatTap,
			"data: {\"choices\":[]}\r\n\r\ndata: {\"choices\":[]}\r\n\r\ndata: [DONE]\r\n\r\n", "data: {\"choices\":[]}\r\n\r\ndata: [DONE]\r\n\r\n"},
	} {
		for _, mode := range []string{"Read", "WriteTo"} {
			t.Run(tc.desc+"/"+mode, func(t *testing.T) {
				t.Parallel()
				var got bytes.Buffer
				settledAt, settles := -1, 0
				buf := make([]byte, 64<<10)
				b := &streamBody{
					up: io.NopCloser(strings.NewReader(tc.stream)), t: tc.tap(), buf: &buf,
					settle: func(error) pipeline.Reply {
						if settles++; settles == 1 {
							settledAt = got.Len()
						}
						return pipeline.Reply{}
					},
					done: func() {},
				}
				first := -1
				if mode == "Read" {
					p := make([]byte, 64<<10)
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
				} else {
					// As fasthttp's server writes it: a chunk per Write.
					w := writerFunc(func(p []byte) (int, error) {
						if first < 0 {
							first = len(p)
						}
						return got.Write(p)
					})
					if n, err := b.WriteTo(w); err != nil || n != int64(len(tc.stream)) {
						t.Fatalf("WriteTo: %d %v", n, err)
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
}

// tapTurn is codec's stream tap as a relayed stream's turn, which holds
// nothing back.
func tapTurn(codec wire.Codec, req *wire.Request) streamTurn {
	return &testTurn{StreamTap: codec.NewStreamTap(req), codec: codec}
}

type testTurn struct {
	wire.StreamTap
	codec wire.Codec
}

func (t *testTurn) Feed(chunk []byte) ([]byte, bool) {
	out := t.StreamTap.Feed(chunk)
	return out, t.Done()
}

func (t *testTurn) CutEvent() []byte {
	return wire.ErrorEvent(t.codec, wire.ErrBadGateway, "upstream stream ended before its terminal event")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Served by fasthttp, a burst that arrives in one read reaches the client
// as three chunks: the first event, the rest up to the terminal event
// (one chunk, whatever its size), the terminal event after the settlement.
func TestStreamBurstIsOneChunkOnTheWire(t *testing.T) {
	var sb strings.Builder
	for i := range 50 {
		fmt.Fprintf(&sb, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%03d %s\"}}]}\n\n", i, strings.Repeat("x", 200))
	}
	sb.WriteString("data: [DONE]\n\n")
	stream := sb.String()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{WriteBufferSize: 16 << 10, Handler: func(ctx *fasthttp.RequestCtx) {
		buf := make([]byte, 64<<10)
		ctx.Response.SetBodyStream(&streamBody{
			up: io.NopCloser(strings.NewReader(stream)), buf: &buf,
			t:      tapTurn(openai.Chat{}, &wire.Request{Stream: true}),
			settle: func(error) pipeline.Reply { return pipeline.Reply{} }, done: func() {},
		}, -1)
	}}
	go srv.Serve(rawListener{ln})
	defer srv.Shutdown()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if te := resp.TransferEncoding; len(te) != 1 || te[0] != "chunked" {
		t.Fatalf("transfer encoding %v", te)
	}
	// Read the chunks' framing from the raw bytes after the headers.
	var sizes []int
	var body []byte
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size line %q", line)
		}
		if n == 0 {
			break
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(r, chunk); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, int(n))
		body = append(body, chunk[:n]...)
	}
	if string(body) != stream {
		t.Fatalf("client got %d bytes, want the upstream's %d", len(body), len(stream))
	}
	firstEvent := sse.FirstEventEnd([]byte(stream))
	terminal := len("data: [DONE]\n\n")
	if want := []int{firstEvent, len(stream) - firstEvent - terminal, terminal}; !slices.Equal(sizes, want) {
		t.Fatalf("chunks of %v bytes, want %v", sizes, want)
	}
}

// A stream that ends before its terminal event with a tool call held is
// judged before any of the call goes out: the relay settles, then writes
// what the turn releases.
func TestStreamBodyJudgesAHeldCallWhenTheUpstreamEndsEarly(t *testing.T) {
	t.Parallel()
	const text = "data: {\"text\":1}\n\n"
	const call = "data: {\"call\":1}\n\n"
	turn := &holdingTurn{}
	var got bytes.Buffer
	settled := -1
	buf := make([]byte, 64<<10)
	b := &streamBody{up: io.NopCloser(strings.NewReader(text + call)), t: turn, buf: &buf,
		settle: func(error) pipeline.Reply {
			if settled < 0 {
				settled = got.Len()
				turn.judged = true
			}
			return pipeline.Reply{Tail: turn.release()}
		},
		done: func() {}}
	if _, err := b.WriteTo(writerFunc(got.Write)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if settled != len(text) || got.String() != text+"judged:"+call {
		t.Fatalf("settled after %d bytes; client got %q", settled, got.String())
	}
}

// holdingTurn relays events until one holds "call", then holds the rest
// until the settlement releases it, marked as judged when it was.
type holdingTurn struct {
	held            []byte
	holding, judged bool
}

func (h *holdingTurn) Feed(chunk []byte) ([]byte, bool) {
	if i := bytes.Index(chunk, []byte("data: {\"call\"")); i >= 0 || h.holding {
		i = max(i, 0)
		h.holding = true
		h.held = append(h.held, chunk[i:]...)
		return chunk[:i], false
	}
	return chunk, false
}
func (h *holdingTurn) Terminal([]byte) bool { return false }
func (h *holdingTurn) CutEvent() []byte     { return nil }
func (h *holdingTurn) End() []byte          { return nil }

func (h *holdingTurn) release() []byte {
	if !h.judged {
		return h.held
	}
	return append([]byte("judged:"), h.held...)
}
