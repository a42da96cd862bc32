package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/config"
)

// A refusal of a request whose body is far larger than the socket
// buffers (64 MB against the default 32 MiB limit; an unknown key with a
// 16 MB body) reaches a client that is still sending it, through a real
// TCP connection: the gateway reads and drops the body before it answers,
// instead of closing on it unread, which the kernel turns into a reset
// the client sees in place of the answer. Content-Length and chunked
// alike; a client that asks Expect: 100-continue is refused before it
// sends anything.
func TestLargeBodyRefusalsArrive(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeJSON(w, 500, []byte(`{"error":{"message":"this test's upstream must not be called","type":"server_error"}}`))
	})
	g := startGateway(t, up.URL, func(c *config.Config) {
		c.VirtualKeys = map[string]config.Principal{"sk-agent-test": {Tenant: "acme"}, "sk-ant-agent-test": {Tenant: "acme"}}
	})
	pad := bytes.Repeat([]byte("x"), 64<<20)
	oaHdr := "Authorization: Bearer sk-agent-test\r\n"
	anHdr := "X-Api-Key: sk-ant-agent-test\r\nAnthropic-Version: 2023-06-01\r\n"
	for _, tc := range []struct {
		desc     string
		route    string
		hdr      string
		size     int
		chunked  bool
		expect   bool // Expect: 100-continue, and no body sent
		status   int
		provider string
	}{
		{desc: "64 MB with Content-Length, chat", route: "/v1/chat/completions", hdr: oaHdr, size: 64 << 20, status: 413, provider: "openai"},
		{desc: "64 MB chunked, chat", route: "/v1/chat/completions", hdr: oaHdr, size: 64 << 20, chunked: true, status: 413, provider: "openai"},
		{desc: "64 MB with Content-Length, messages", route: "/v1/messages", hdr: anHdr, size: 64 << 20, status: 413, provider: "anthropic"},
		{desc: "64 MB chunked, messages", route: "/v1/messages", hdr: anHdr, size: 64 << 20, chunked: true, status: 413, provider: "anthropic"},
		{desc: "64 MB pass-through", route: "/v1/files", hdr: oaHdr, size: 64 << 20, status: 413, provider: "openai"},
		{desc: "unknown key, 16 MB", route: "/v1/chat/completions", hdr: "Authorization: Bearer sk-unknown\r\n", size: 16 << 20, status: 401, provider: "openai"},
		{desc: "unknown key, 16 MB chunked, messages", route: "/v1/messages", hdr: "X-Api-Key: sk-unknown\r\nAnthropic-Version: 2023-06-01\r\n",
			size: 16 << 20, chunked: true, status: 401, provider: "anthropic"},
		{desc: "64 MB announced with Expect: 100-continue", route: "/v1/messages", hdr: anHdr, size: 64 << 20, expect: true, status: 413, provider: "anthropic"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			head := "POST " + tc.route + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + tc.hdr
			switch {
			case tc.chunked:
				head += "Transfer-Encoding: chunked\r\n\r\n"
			case tc.expect:
				head += "Expect: 100-continue\r\nContent-Length: " + strconv.Itoa(tc.size) + "\r\n\r\n"
			default:
				head += "Content-Length: " + strconv.Itoa(tc.size) + "\r\n\r\n"
			}
			send := func(w io.Writer) error {
				if tc.expect {
					return nil // a client that waits for 100 Continue
				}
				if !tc.chunked {
					_, err := w.Write(pad[:tc.size])
					return err
				}
				for b := pad[:tc.size]; len(b) > 0; {
					n := min(len(b), 1<<20)
					if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", n, b[:n]); err != nil {
						return err
					}
					b = b[n:]
				}
				_, err := io.WriteString(w, "0\r\n\r\n")
				return err
			}
			resp, body, sent := rawExchange(t, g.DataAddr, head, send)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			spCheckErrorFormat(t, tc.provider, body)
			if tc.status == 413 && !strings.Contains(string(body), "limit") {
				t.Errorf("413 body %s", body)
			}
			if sendErr := <-sent; sendErr != nil {
				t.Errorf("the gateway did not take the whole body: %v", sendErr)
			}
		})
	}
	t.Run("net/http client", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, gwURL(g)+"/v1/chat/completions", bytes.NewReader(pad))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer sk-agent-test")
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 413 {
			t.Fatalf("%d %v: %s", resp.StatusCode, err, body)
		}
		spCheckErrorFormat(t, "openai", body)
	})
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream saw %d calls", n)
	}
}

// The discarding of a refused body is bounded by limits.max_drain_bytes:
// past it, or when the body is announced larger, the gateway closes the
// connection rather than read on, however long the client would send.
func TestRefusedBodyDrainIsBounded(t *testing.T) {
	t.Parallel()
	g := startGateway(t, spClosedURL(t), func(c *config.Config) {
		c.VirtualKeys = map[string]config.Principal{"sk-agent-test": {Tenant: "acme"}}
		c.Limits.MaxDrainBytes = 1 << 20
	})
	chunk := fmt.Appendf(nil, "%x\r\n%s\r\n", 64<<10, bytes.Repeat([]byte("x"), 64<<10))
	for _, tc := range []struct {
		desc    string
		framing string
	}{
		{"endless chunked body", "Transfer-Encoding: chunked\r\n"},
		{"Content-Length past the bound", "Content-Length: 1099511627776\r\n"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			conn, err := net.DialTimeout("tcp", g.DataAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			sent := make(chan error, 1)
			go func() {
				_, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"+
					"Authorization: Bearer sk-unknown\r\n"+tc.framing+"\r\n")
				for err == nil {
					_, err = conn.Write(chunk)
				}
				sent <- err
			}()
			_, _ = io.ReadAll(conn)
			if err := <-sent; errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the gateway read on past limits.max_drain_bytes")
			}
		})
	}
}
