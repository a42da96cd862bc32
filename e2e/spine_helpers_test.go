package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/app"
)

// Helpers of the spine tests (spine_*_test.go). Names start with sp so they
// do not collide with other files of the package.

// spServeFixture answers every call with one recorded fixture: an .sse file
// as a flushed event stream, anything else as a 200 JSON body.
func spServeFixture(t *testing.T, name string) func(http.ResponseWriter, *http.Request, []byte) {
	b := fixture(t, name)
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		if path.Ext(name) == ".sse" {
			writeSSE(w, b)
			return
		}
		writeJSON(w, 200, b)
	}
}

// spEvents splits a stream the way writeSSE sends it: event by event, each
// with its trailing blank line.
func spEvents(stream []byte) []string {
	var out []string
	for _, ev := range strings.SplitAfter(strings.ReplaceAll(string(stream), "\r\n", "\n"), "\n\n") {
		if ev != "" {
			out = append(out, ev)
		}
	}
	return out
}

// spPost sends body to the gateway with a plain net/http client (no SDK,
// no retries) and returns the whole answer.
func spPost(t *testing.T, g *app.Gateway, route string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, b, err := spPostCut(g, route, hdr, body)
	if err != nil {
		t.Fatalf("POST %s: %v", route, err)
	}
	return resp, b
}

var spClient = &http.Client{Timeout: 30 * time.Second}

// spRawExchange writes a raw HTTP/1.1 request (head, then body) on a fresh
// connection and reads the answer. The body is written on the side and its
// write errors ignored: a server refusing a body may answer and close
// before reading all of it.
func spRawExchange(t *testing.T, addr, head string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, b, _ := rawExchange(t, addr, head, func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	return resp, b
}

// rawExchange writes head, then what send writes, on a fresh connection
// to addr while it reads the answer, as HTTP clients do. sent gives the
// writing's error once it ends (the connection's deadline bounds it).
func rawExchange(t *testing.T, addr, head string, send func(io.Writer) error) (resp *http.Response, body []byte, sent <-chan error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(conn, 64<<10)
		_, err := io.WriteString(w, head)
		if err == nil {
			err = send(w)
		}
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
		errc <- err
	}()
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v (read so far %q)", err, body)
	}
	return resp, body, errc
}

// spClosedURL is the base URL of a port nothing listens on.
func spClosedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// spCheckErrorFormat checks that body is an error in the provider's own
// format: OpenAI {"error":{"message","type",…}}, Anthropic
// {"type":"error","error":{"type","message"}}.
func spCheckErrorFormat(t *testing.T, provider string, body []byte) {
	t.Helper()
	var e struct {
		Type  *string `json:"type"`
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s error body is not JSON: %v: %s", provider, err, body)
	}
	if e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("%s error body lacks error.message/error.type: %s", provider, body)
	}
	switch provider {
	case "openai":
		if e.Type != nil {
			t.Fatalf("OpenAI error body has a top-level type (Anthropic format?): %s", body)
		}
	case "anthropic":
		if e.Type == nil || *e.Type != "error" {
			t.Fatalf(`Anthropic error body lacks "type":"error": %s`, body)
		}
	default:
		panic(provider)
	}
}

// spCheckRunHeaders checks the run headers of docs/design.md §3 on a model call's
// answer and returns the run id.
func spCheckRunHeaders(t *testing.T, h http.Header, step string) string {
	t.Helper()
	for _, k := range []string{"X-Run-Id", "X-Run-State", "X-Run-Step", "X-Run-Budget-Remaining"} {
		if h.Get(k) == "" {
			t.Errorf("answer lacks %s (headers %v)", k, h)
		}
	}
	if step != "" && h.Get("X-Run-Step") != step {
		t.Errorf("X-Run-Step %q, want %q", h.Get("X-Run-Step"), step)
	}
	// The gateway's own time on the call (issue 10): milliseconds, below
	// the whole call's time as the test sees it (generous: a loaded CI).
	if ms, err := strconv.ParseFloat(h.Get("X-Haltline-Overhead-Ms"), 64); err != nil || ms < 0 || ms > 30_000 {
		t.Errorf("X-Haltline-Overhead-Ms %q", h.Get("X-Haltline-Overhead-Ms"))
	}
	if t.Failed() {
		t.FailNow()
	}
	return h.Get("X-Run-Id")
}

// spChatBody is a minimal chat request.
func spChatBody(stream bool, extra string) []byte {
	s := `{"model":"gpt-4o","messages":[{"role":"user","content":"What is the capital of Mexico?"}]`
	if stream {
		s += `,"stream":true`
	}
	return []byte(s + extra + "}")
}

// spMessagesBody is a minimal Anthropic Messages request.
func spMessagesBody(stream bool) []byte {
	return fmt.Appendf(nil, `{"model":"claude-sonnet-4-5","max_tokens":256,"stream":%t,"messages":[{"role":"user","content":"Say 2."}]}`, stream)
}

// spOpenAI and spAnthropic are openaiClient and anthropicClient, addressable.
func spOpenAI(g *app.Gateway, opts ...option.RequestOption) *openai.Client {
	c := openaiClient(g, opts...)
	return &c
}

func spAnthropic(g *app.Gateway, opts ...aoption.RequestOption) *anthropic.Client {
	c := anthropicClient(g, opts...)
	return &c
}
