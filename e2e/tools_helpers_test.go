package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/haltline/haltline/app"
)

// Helpers of the tool tests (tools_*_test.go); names start with tl.

// tlCounter counts what a fake tool server executed, per tool.
type tlCounter struct {
	mu     sync.Mutex
	n      map[string]int
	header map[string]http.Header // last request headers per tool
}

func newTLCounter() *tlCounter {
	return &tlCounter{n: map[string]int{}, header: map[string]http.Header{}}
}

func (c *tlCounter) hit(tool string, h http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[tool]++
	if h != nil {
		c.header[tool] = h.Clone()
	}
}

func (c *tlCounter) count(tool string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[tool]
}

func (c *tlCounter) lastHeader(tool string) http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.header[tool]
}

type tlPathIn struct {
	Path string `json:"path" jsonschema:"the file path"`
}

type tlWriteIn struct {
	Path string `json:"path"`
	Text string `json:"text"`
}

// tlMCPServer is an MCP server built with the official SDK, served by its
// streamable HTTP handler. Tools: read (read-only), write, delete
// (destructive), format_disk, big (a 200 KB result), slow (sleeps).
func tlMCPServer(t *testing.T, c *tlCounter, jsonResponse bool) *httptest.Server {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "fake-fs", Version: "1.0.0"}, nil)
	hdr := func(req *mcp.CallToolRequest) http.Header {
		if req.Extra == nil {
			return nil
		}
		return req.Extra.Header
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "read", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in tlPathIn) (*mcp.CallToolResult, any, error) {
			c.hit("read", hdr(req))
			return text("content of " + in.Path), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "write"},
		func(ctx context.Context, req *mcp.CallToolRequest, in tlWriteIn) (*mcp.CallToolResult, any, error) {
			c.hit("write", hdr(req))
			return text(fmt.Sprintf("wrote %d bytes to %s (write #%d)", len(in.Text), in.Path, c.count("write"))), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "delete"},
		func(ctx context.Context, req *mcp.CallToolRequest, in tlPathIn) (*mcp.CallToolResult, any, error) {
			c.hit("delete", hdr(req))
			return text("deleted " + in.Path), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "format_disk"},
		func(ctx context.Context, req *mcp.CallToolRequest, in tlPathIn) (*mcp.CallToolResult, any, error) {
			c.hit("format_disk", hdr(req))
			return text("formatted"), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "big", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in tlPathIn) (*mcp.CallToolResult, any, error) {
			c.hit("big", hdr(req))
			return text(tlBigText()), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "slow"},
		func(ctx context.Context, req *mcp.CallToolRequest, in tlPathIn) (*mcp.CallToolResult, any, error) {
			c.hit("slow", hdr(req))
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
			}
			return text("slow done"), nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// tlBigText is a 200 KB result with a recognisable head and tail.
func tlBigText() string {
	var b strings.Builder
	b.WriteString("HEAD-MARKER ")
	for b.Len() < 200<<10 {
		fmt.Fprintf(&b, "line %06d of a long listing ü\n", b.Len())
	}
	b.WriteString(" TAIL-MARKER")
	return b.String()
}

// tlHeaders adds fixed headers to every request of an SDK client.
type tlHeaders struct {
	h  map[string]string
	rt http.RoundTripper
}

func (t tlHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.rt.RoundTrip(r)
}

// tlConnect opens an MCP client session through the gateway.
func tlConnect(t *testing.T, g *app.Gateway, server string, hdr map[string]string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1.0.0"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: gwURL(g) + "/mcp/" + server,
		HTTPClient: &http.Client{Transport: tlHeaders{h: hdr, rt: http.DefaultTransport}, Timeout: 30 * time.Second},
		MaxRetries: -1, DisableStandaloneSSE: true}
	cs, err := client.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect through the gateway: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// tlCall calls a tool and fails the test on a protocol error.
func tlCall(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func tlText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// tlMeta returns the gateway's details of its own answer.
func tlMeta(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, _ := res.Meta["haltline"].(map[string]any)
	if m == nil {
		t.Fatalf("answer lacks _meta.haltline: %s", tlText(res))
	}
	return m
}

// tlDecide posts a decision on a ticket.
func tlDecide(t *testing.T, g *app.Gateway, ticket, decision, by string) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"decision":%q,"by":%q}`, decision, by)
	resp, err := http.Post(adminURL(g)+"/api/v1/approvals/"+ticket, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("decide %s: %d %s", ticket, resp.StatusCode, b)
	}
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// tlGet fetches a control plane URL and returns status and body.
func tlGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// tlRPC posts a raw JSON-RPC body to an MCP route.
func tlRPC(t *testing.T, g *app.Gateway, route string, hdr map[string]string, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, gwURL(g)+route, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := spClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("answer is not JSON (%d): %v: %.300s", resp.StatusCode, err, b)
	}
	return resp, m
}

// tlRPCError returns the JSON-RPC error code of an answer, or 0.
func tlRPCError(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0
	}
	c, _ := e["code"].(float64)
	return int(c)
}

type appGateway = app.Gateway

func httpPost(url, body string) (int, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

type mcpCallParams = mcp.CallToolParams
