package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/config"
)

// A client that sends its headers or its body too slowly, or holds a
// keep-alive connection idle, has its connection closed at the matching
// timeout (limits.header_timeout, body_timeout, idle_timeout), however
// steadily it trickles bytes; the other two timeouts are long here, so
// only the one under test can close it.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	const short, long = 200 * time.Millisecond, time.Minute
	for _, tc := range []struct {
		desc    string
		timeout func(*config.Limits) *time.Duration
		head    string // sent at once
		trickle bool   // then one byte at a time, until the connection ends
		status  string // the answer before the close; "" for none
	}{
		{desc: "headers", timeout: func(l *config.Limits) *time.Duration { return &l.HeaderTimeout },
			head: "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n", trickle: true, status: "408"},
		{desc: "body", timeout: func(l *config.Limits) *time.Duration { return &l.BodyTimeout },
			head: "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-agent-test\r\n" +
				"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", trickle: true, status: "408"},
		{desc: "idle keep-alive", timeout: func(l *config.Limits) *time.Duration { return &l.IdleTimeout },
			head: "GET /nope HTTP/1.1\r\nHost: gw\r\n\r\n", status: "404"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, spClosedURL(t), func(c *config.Config) {
				c.Limits.HeaderTimeout, c.Limits.BodyTimeout, c.Limits.IdleTimeout = long, long, long
				*tc.timeout(&c.Limits) = short
			})
			conn, err := net.Dial("tcp", g.DataAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Far past the short timeout, well before the long ones.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tc.head); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			if tc.trickle {
				go func() {
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							if _, err := conn.Write([]byte("a")); err != nil {
								return
							}
						}
					}
				}()
			}
			got, err := io.ReadAll(conn)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the gateway kept the connection open (read %q)", got)
			}
			// The closing side may reset a connection still sending: the
			// answer can then be lost, never be another one.
			if len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 "+tc.status+" ") {
				t.Fatalf("answer %q, want %s", got, tc.status)
			}
		})
	}
}

// Connections past limits.max_connections_per_ip from one address, or past
// limits.max_connections in all, are answered 503 (with Retry-After, in a
// body both SDKs read) and closed; other addresses are served meanwhile
// under the per-address bound; /readyz says when the total is reached; a
// closed connection makes room again.
func TestConnectionBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc    string
		mod     func(*config.Limits)
		perAddr bool
	}{
		{desc: "per address", mod: func(l *config.Limits) { l.MaxConnectionsPerIP = 2 }, perAddr: true},
		{desc: "in total", mod: func(l *config.Limits) { l.MaxConnections = 2 }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, spClosedURL(t), func(c *config.Config) { tc.mod(&c.Limits) })
			// The control plane's client is on its own connection from the start.
			admin := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			readyz := func() (int, string) {
				resp, err := admin.Get(adminURL(g) + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if code, body := readyz(); code != 200 {
				t.Fatalf("readyz before: %d %s", code, body)
			}
			held := []net.Conn{dialFrom(t, "127.0.0.1", g.DataAddr), dialFrom(t, "127.0.0.1", g.DataAddr)}
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			// Accepted in order: the third is refused once the two are in.
			over := dialFrom(t, "127.0.0.1", g.DataAddr)
			resp, body := readAnswer(t, over)
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !resp.Close {
				t.Fatalf("connection past the bound: %d %v %s", resp.StatusCode, resp.Header, body)
			}
			spCheckErrorFormat(t, "anthropic", body)
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			if json.Unmarshal(body, &e); e.Error.Code != "service_unavailable" {
				t.Fatalf("no error.code for OpenAI's SDKs: %s", body)
			}
			if tc.perAddr {
				if code := get(t, dialFrom(t, "127.0.0.2", g.DataAddr)); code != 404 {
					t.Fatalf("another address: %d, want served (404)", code)
				}
				if code, body := readyz(); code != 200 {
					t.Fatalf("readyz with one address at its bound: %d %s", code, body)
				}
			} else {
				waitFor(t, "readyz 503 at max_connections", func() bool {
					code, body := readyz()
					return code == 503 && strings.Contains(body, "max_connections")
				})
			}
			held[0].Close()
			waitFor(t, "a connection served once one closed", func() bool {
				return get(t, dialFrom(t, "127.0.0.1", g.DataAddr)) == 404
			})
			waitFor(t, "readyz 200 below the bounds", func() bool { code, _ := readyz(); return code == 200 })
		})
	}
}

// dialFrom opens a connection to addr from the local address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads one HTTP answer from c.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, b
}

// get sends GET /nope on c, closes c, and returns the answer's status, 0
// for none (a refused connection may be reset before its answer is read).
func get(t *testing.T, c net.Conn) int {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /nope HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls cond until it holds, failing the test after a long while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
