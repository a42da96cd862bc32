package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/runstate"
)

// tlHTTPTools is a plain HTTP tool server: /search, /mutate, /purge,
// /big, /slow, /junk.
func tlHTTPTools(t *testing.T, c *tlCounter) *httptest.Server {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		tool, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		c.hit(tool, r.Header)
		switch tool {
		case "big":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, tlBigText())
		case "slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		case "huge":
			w.Write(make([]byte, 2<<20))
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"tool": tool, "path": r.URL.Path, "query": r.URL.RawQuery, "body": string(b)})
		}
	}))
	t.Cleanup(hs.Close)
	return hs
}

func tlHTTPGateway(t *testing.T, toolURL string) *app.Gateway {
	dir := t.TempDir()
	os.WriteFile(dir+"/data.json", []byte(`{"haltline":{"tool_defaults":{"denied":["purge_all"]}}}`), 0o600)
	return startGateway(t, "http://127.0.0.1:1", func(c *config.Config) {
		c.PolicyDir = dir
		c.Limits.UpstreamTimeout = time.Second
		c.Limits.MaxResponseBytes = 1 << 20
		hdr := map[string]string{"X-Tool-Key": "${" + tlSecretEnv + "}"}
		c.Tools = map[string]config.HTTPTool{
			"search":    {URL: toolURL + "/search", Level: "L0", Headers: hdr},
			"mutate":    {URL: toolURL + "/mutate", Level: "L1"},
			"purge":     {URL: toolURL + "/purge", Level: "L2"},
			"purge_all": {URL: toolURL + "/purge_all", Level: "L1"},
			"big":       {URL: toolURL + "/big", Level: "L0"},
			"slow":      {URL: toolURL + "/slow", Level: "L0"},
			"huge":      {URL: toolURL + "/huge", Level: "L0"},
		}
	})
}

func tlHTTP(t *testing.T, g *app.Gateway, method, route, runID, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, gwURL(g)+route, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-key")
	if runID != "" {
		req.Header.Set("X-Run-Id", runID)
	}
	resp, err := spClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestToolHTTPRoute(t *testing.T) {
	os.Setenv(tlSecretEnv, "tool-secret-1")
	c := newTLCounter()
	g := tlHTTPGateway(t, tlHTTPTools(t, c).URL)
	run := "r-tool-http"

	// L0 passes to <url>/…, with the query, the credential and the deadline.
	resp, b := tlHTTP(t, g, "GET", "/tools/search/v1/find?q=x", run, "")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"path":"/search/v1/find"`) || !strings.Contains(string(b), `"query":"q=x"`) {
		t.Fatalf("L0: %d %s", resp.StatusCode, b)
	}
	h := c.lastHeader("search")
	if h.Get("X-Tool-Key") != "tool-secret-1" || h.Get("Authorization") != "" || h.Get("X-Run-Deadline-Ms") == "" || h.Get("X-Run-Id") != "" {
		t.Fatalf("headers at the tool: %v", h)
	}
	if resp.Header.Get("X-Run-Id") != run || resp.Header.Get("X-Run-State") == "" {
		t.Fatalf("run headers: %v", resp.Header)
	}

	// Denied: 403 naming the reason, never executed.
	resp, b = tlHTTP(t, g, "POST", "/tools/purge_all", run, `{}`)
	if resp.StatusCode != 403 || !strings.Contains(string(b), "denied") || c.count("purge_all") != 0 {
		t.Fatalf("denied: %d %s", resp.StatusCode, b)
	}

	// L1 twice: once.
	_, b1 := tlHTTP(t, g, "POST", "/tools/mutate", run, `{"id":7,"set":"a"}`)
	_, b2 := tlHTTP(t, g, "POST", "/tools/mutate", run, `{"set":"a", "id":7}`)
	if c.count("mutate") != 1 || string(b1) != string(b2) {
		t.Fatalf("L1 repeat: %d executions, %s / %s", c.count("mutate"), b1, b2)
	}

	// L2: 409 with a ticket, run paused; approve; the retry passes once.
	resp, b = tlHTTP(t, g, "DELETE", "/tools/purge/items/9", run, "")
	var pend struct {
		Error struct{ Type, Ticket, Message string }
	}
	json.Unmarshal(b, &pend)
	if resp.StatusCode != 409 || pend.Error.Type != "approval_pending" || pend.Error.Ticket == "" ||
		!strings.Contains(pend.Error.Message, "pending approval, ticket "+pend.Error.Ticket) {
		t.Fatalf("L2: %d %s", resp.StatusCode, b)
	}
	if rec := runRecord(t, g, run); rec.Status != runstate.Paused {
		t.Fatalf("state %s, want paused", rec.Status)
	}
	tlDecide(t, g, pend.Error.Ticket, "approve", "carol")
	for range 2 {
		if resp, b = tlHTTP(t, g, "DELETE", "/tools/purge/items/9", run, ""); resp.StatusCode != 200 {
			t.Fatalf("after approval: %d %s", resp.StatusCode, b)
		}
	}
	if c.count("purge") != 1 {
		t.Fatalf("approved L2 executed %d times", c.count("purge"))
	}

	// 200 KB: cut, full text at the blob endpoint.
	resp, b = tlHTTP(t, g, "GET", "/tools/big", run, "")
	handle := resp.Header.Get("X-Haltline-Blob")
	if resp.StatusCode != 200 || handle == "" || len([]rune(string(b))) > 2400 || !strings.Contains(string(b), "handle "+handle) {
		t.Fatalf("cut: %d handle %q, %d chars", resp.StatusCode, handle, len(b))
	}
	if st, full := tlGet(t, adminURL(g)+"/api/v1/runs/"+run+"/blobs/"+handle); st != 200 || string(full) != tlBigText() {
		t.Fatalf("blob: %d %d bytes", st, len(full))
	}
	if st, _ := tlGet(t, adminURL(g)+"/api/v1/runs/other/blobs/"+handle); st != 404 {
		t.Fatalf("blob of another run: %d", st)
	}

	rec := runRecord(t, g, run)
	if rec.ToolAttempts != 4 { // search, mutate, purge, big
		t.Fatalf("tool_attempts %d, want 4", rec.ToolAttempts)
	}
}

func TestToolHTTPBadInput(t *testing.T) {
	c := newTLCounter()
	g := tlHTTPGateway(t, tlHTTPTools(t, c).URL)
	run := "r-tool-http-bad"
	cases := []struct {
		desc, method, route string
		status              int
		errType             string
	}{
		{desc: "unknown tool", method: "GET", route: "/tools/nope/x", status: 404, errType: "not_found"},
		{desc: "tool times out", method: "GET", route: "/tools/slow", status: 504, errType: "timeout"},
		{desc: "oversized result", method: "GET", route: "/tools/huge", status: 502, errType: "bad_gateway"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			resp, b := tlHTTP(t, g, tc.method, tc.route, run, "")
			var e struct {
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.status || e.Error.Type != tc.errType || e.Error.Message == "" {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		})
	}
	rec := runRecord(t, g, run)
	if rec.ToolAttempts != 2 || rec.Status.Final() {
		t.Fatalf("after failures: tool_attempts %d (want 2), state %s", rec.ToolAttempts, rec.Status)
	}
	// The run still works.
	if resp, _ := tlHTTP(t, g, "GET", "/tools/search", run, ""); resp.StatusCode != 200 {
		t.Fatalf("after failures: %d", resp.StatusCode)
	}
}

func TestToolMCPBadInput(t *testing.T) {
	c := newTLCounter()
	srv := tlMCPServer(t, c, false)
	junk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch {
		case strings.Contains(string(b), `"huge"`):
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 2<<20) + `"}]}}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "<html>garbage</html>")
		}
	}))
	t.Cleanup(junk.Close)
	g := tlMCPGateway(t, srv.URL, "http://127.0.0.1:1", func(c *config.Config) {
		c.Limits.UpstreamTimeout = time.Second
		c.Limits.MaxResponseBytes = 1 << 20
		c.MCPServers["junk"] = config.MCPServer{URL: junk.URL}
	})
	run := map[string]string{"X-Run-Id": "r-tool-mcp-bad"}
	cases := []struct {
		desc, route, body string
		status, code      int
	}{
		{desc: "malformed JSON", route: "/mcp/fs", body: `{"jsonrpc":"2.0",`, status: 400, code: -32700},
		{desc: "batch", route: "/mcp/fs", body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, status: 400, code: -32600},
		{desc: "not JSON-RPC 2.0", route: "/mcp/fs", body: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, status: 400, code: -32600},
		{desc: "unknown server", route: "/mcp/nope", body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`, status: 404, code: -32600},
		{desc: "call without a name", route: "/mcp/fs", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, status: 200, code: -32602},
		{desc: "garbage answer", route: "/mcp/junk", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`, status: 200, code: -32002},
		{desc: "oversized result", route: "/mcp/junk", body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"huge"}}`, status: 200, code: -32002},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			resp, m := tlRPC(t, g, tc.route, run, tc.body)
			if resp.StatusCode != tc.status || tlRPCError(m) != tc.code {
				t.Fatalf("%d %v", resp.StatusCode, m)
			}
		})
	}
	// A server that times out: a JSON-RPC error, the attempt metered.
	cs := tlConnect(t, g, "fs", run)
	if _, err := cs.CallTool(t.Context(), &mcpCallParams{Name: "slow", Arguments: map[string]any{"path": "x"}}); err == nil ||
		!strings.Contains(err.Error(), "timed out") {
		t.Fatalf("slow tool: %v", err)
	}
	// An unknown tool: the server's own JSON-RPC error, passed on.
	if _, err := cs.CallTool(t.Context(), &mcpCallParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil ||
		!strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("unknown tool: %v", err)
	}
	rec := runRecord(t, g, "r-tool-mcp-bad")
	// garbage + oversized + slow + unknown tool reached a server.
	if rec.ToolAttempts != 4 || rec.Status.Final() || c.count("slow") != 1 {
		t.Fatalf("tool_attempts %d (want 4), state %s, slow %d", rec.ToolAttempts, rec.Status, c.count("slow"))
	}
	// Still usable.
	if res := tlCall(t, cs, "read", map[string]any{"path": "ok"}); res.IsError {
		t.Fatalf("after failures: %q", tlText(res))
	}
}
