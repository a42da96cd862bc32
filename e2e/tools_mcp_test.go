package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/runstate"
)

const tlSecretEnv = "HALTLINE_E2E_TOOL_TOKEN"

// tlMCPGateway starts the gateway with the fake MCP server as "fs".
func tlMCPGateway(t *testing.T, mcpURL, modelURL string, mod ...func(*config.Config)) *appGateway {
	t.Helper()
	dir := t.TempDir()
	// format_disk is refused by policy data: a denied call never reaches the server.
	if err := os.WriteFile(dir+"/data.json", []byte(`{"haltline":{"tool_defaults":{"level":"L1","denied":["fs/format_disk","format_disk","purge_all"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return startGateway(t, modelURL, append([]func(*config.Config){func(c *config.Config) {
		c.PolicyDir = dir
		c.MCPServers = map[string]config.MCPServer{"fs": {
			URL: mcpURL,
			Tools: map[string]config.ToolSpec{"read": {Level: "L0"}, "big": {Level: "L0"}, "write": {Level: "L1"},
				"delete": {Level: "L2"}},
			Headers: map[string]string{"Authorization": "Bearer ${" + tlSecretEnv + "}"},
		}}
	}}, mod...)...)
}

func TestToolMCPGates(t *testing.T) {
	os.Setenv(tlSecretEnv, "tool-secret-1")
	for _, jsonMode := range []bool{false, true} {
		name := "sse"
		if jsonMode {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			c := newTLCounter()
			srv := tlMCPServer(t, c, jsonMode)
			g := tlMCPGateway(t, srv.URL, "http://127.0.0.1:1")
			runID := "r-tool-mcp-" + name
			cs := tlConnect(t, g, "fs", map[string]string{"X-Run-Id": runID, "Authorization": "Bearer agent-key"})

			// tools/list passes, and the gateway adds its read tool.
			list, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range list.Tools {
				names = append(names, tl.Name)
			}
			if !strings.Contains(strings.Join(names, ","), "haltline_read_blob") || !strings.Contains(strings.Join(names, ","), "read") {
				t.Fatalf("tools/list: %v", names)
			}

			// L0 passes, with the credential injected and the deadline passed on.
			res := tlCall(t, cs, "read", map[string]any{"path": "a.txt"})
			if res.IsError || tlText(res) != "content of a.txt" || c.count("read") != 1 {
				t.Fatalf("L0 call: %v %q (server saw %d)", res.IsError, tlText(res), c.count("read"))
			}
			h := c.lastHeader("read")
			if h.Get("Authorization") != "Bearer tool-secret-1" {
				t.Errorf("credential not injected (or the agent's leaked): %q", h.Get("Authorization"))
			}
			if h.Get("X-Run-Deadline-Ms") == "" {
				t.Errorf("no X-Run-Deadline-Ms at the tool")
			}

			// A schema error never reaches the server and carries the schema.
			res = tlCall(t, cs, "read", map[string]any{"path": 5})
			if !res.IsError || !strings.Contains(tlText(res), "input schema") || tlMeta(t, res)["schema"] == nil {
				t.Fatalf("schema error: %q", tlText(res))
			}
			if c.count("read") != 1 {
				t.Fatalf("schema error reached the server")
			}

			// A denied call never executes.
			res = tlCall(t, cs, "format_disk", map[string]any{"path": "/"})
			if !res.IsError || !strings.Contains(tlText(res), "denied") || c.count("format_disk") != 0 {
				t.Fatalf("denied call: %q (server saw %d)", tlText(res), c.count("format_disk"))
			}

			// Two identical L1 writes reach the server once.
			w1 := tlCall(t, cs, "write", map[string]any{"path": "b.txt", "text": "hello"})
			w2 := tlCall(t, cs, "write", map[string]any{"path": "b.txt", "text": "hello"})
			if c.count("write") != 1 || tlText(w1) != tlText(w2) {
				t.Fatalf("L1 repeat: server saw %d, answers %q / %q", c.count("write"), tlText(w1), tlText(w2))
			}

			// L2: held, ticket, run paused; approved; the retry passes once.
			res = tlCall(t, cs, "delete", map[string]any{"path": "c.txt"})
			if !res.IsError || !strings.Contains(tlText(res), "pending approval, ticket ") {
				t.Fatalf("L2 call: %q", tlText(res))
			}
			ticket, _ := tlMeta(t, res)["ticket"].(string)
			if rec := runRecord(t, g, runID); rec.Status != runstate.Paused {
				t.Fatalf("run state %s, want paused", rec.Status)
			}
			var pending struct {
				Approvals []struct{ Ticket, Status, Tool string }
			}
			getJSON(t, adminURL(g)+"/api/v1/approvals?status=pending", &pending)
			if len(pending.Approvals) != 1 || pending.Approvals[0].Ticket != ticket {
				t.Fatalf("pending approvals: %+v, want ticket %s", pending.Approvals, ticket)
			}
			res = tlCall(t, cs, "delete", map[string]any{"path": "c.txt"})
			if !strings.Contains(tlText(res), ticket) || c.count("delete") != 0 {
				t.Fatalf("retry before approval: %q", tlText(res))
			}
			dec := tlDecide(t, g, ticket, "approve", "alice")
			if dec["decided_by"] != "alice" || dec["decided_at"] == nil {
				t.Fatalf("decision record: %v", dec)
			}
			for i := range 3 {
				res = tlCall(t, cs, "delete", map[string]any{"path": "c.txt"})
				if res.IsError || tlText(res) != "deleted c.txt" {
					t.Fatalf("retry %d after approval: %q", i, tlText(res))
				}
			}
			if c.count("delete") != 1 {
				t.Fatalf("approved L2 call reached the server %d times, want 1", c.count("delete"))
			}

			// A 200 KB result is cut, and read back whole.
			res = tlCall(t, cs, "big", map[string]any{"path": "log"})
			txt := tlText(res)
			if len([]rune(txt)) > 2400 || !strings.HasPrefix(txt, "HEAD-MARKER") || !strings.Contains(txt, "TAIL-MARKER") {
				t.Fatalf("cut result: %d chars", len([]rune(txt)))
			}
			i := strings.Index(txt, "handle b-")
			if i < 0 || !strings.Contains(txt, "/api/v1/runs/"+runID+"/blobs/") {
				t.Fatalf("cut result names no handle / URL: %q", txt[len(txt)-300:])
			}
			handle := strings.Fields(txt[i+len("handle "):])[0]
			handle = strings.TrimRight(handle, ",")
			st, full := tlGet(t, adminURL(g)+"/api/v1/runs/"+runID+"/blobs/"+handle)
			if st != 200 || string(full) != tlBigText() {
				t.Fatalf("blob endpoint: %d, %d bytes (want %d)", st, len(full), len(tlBigText()))
			}
			res = tlCall(t, cs, "haltline_read_blob", map[string]any{"handle": handle})
			if res.IsError || tlText(res) != tlBigText() {
				t.Fatalf("read tool: error %v, %d bytes", res.IsError, len(tlText(res)))
			}
			res = tlCall(t, cs, "haltline_read_blob", map[string]any{"handle": handle, "offset": 10, "length": 20})
			if want := tlBigText()[10:30]; res.IsError || !strings.HasSuffix(tlText(res), "\n"+want) || len(tlText(res)) > 80 {
				t.Fatalf("read tool, a slice: error %v, %q (want its characters %q)", res.IsError, tlText(res), want)
			}

			// Meters: every execution through the gateway, none of the answers it gave itself.
			rec := runRecord(t, g, runID)
			want := int64(c.count("read") + c.count("write") + c.count("delete") + c.count("big"))
			if rec.ToolAttempts != want || want != 4 {
				t.Fatalf("tool_attempts %d, want %d (4)", rec.ToolAttempts, want)
			}
		})
	}
}

func TestToolMCPApprovalDenied(t *testing.T) {
	c := newTLCounter()
	srv := tlMCPServer(t, c, false)
	g := tlMCPGateway(t, srv.URL, "http://127.0.0.1:1")
	cs := tlConnect(t, g, "fs", map[string]string{"X-Run-Id": "r-tool-deny"})
	res := tlCall(t, cs, "delete", map[string]any{"path": "z"})
	ticket, _ := tlMeta(t, res)["ticket"].(string)
	dec := tlDecide(t, g, ticket, "deny", "")
	if dec["status"] != "denied" || dec["decided_by"] != "anonymous" {
		t.Fatalf("decision: %v", dec)
	}
	rec := runRecord(t, g, "r-tool-deny")
	if rec.Status != runstate.Terminated || rec.Reason != runstate.ReasonApprovalDenied {
		t.Fatalf("run %s/%s, want terminated/approval_denied", rec.Status, rec.Reason)
	}
	res = tlCall(t, cs, "delete", map[string]any{"path": "z"})
	if !res.IsError || c.count("delete") != 0 || !strings.Contains(tlText(res), "approval_denied") {
		t.Fatalf("after deny: %q, server saw %d", tlText(res), c.count("delete"))
	}
	// A ticket is decided once.
	resp, err := httpPost(adminURL(g)+"/api/v1/approvals/"+ticket, `{"decision":"approve"}`)
	if err != nil || resp != 409 {
		t.Fatalf("second decision: %d %v", resp, err)
	}
}

func TestToolMCPPausedTimeFrozen(t *testing.T) {
	c := newTLCounter()
	srv := tlMCPServer(t, c, true)
	dir := t.TempDir()
	os.WriteFile(dir+"/budget.rego", []byte("package haltline.budget\n\nlimits := {\"deadline_ms\": 60000, \"paused_time\": \"freeze\"}\n"), 0o600)
	g := startGateway(t, "http://127.0.0.1:1", func(c *config.Config) {
		c.PolicyDir = dir
		c.MCPServers = map[string]config.MCPServer{"fs": {URL: srv.URL, Tools: map[string]config.ToolSpec{"delete": {Level: "L2"}}}}
	})
	cs := tlConnect(t, g, "fs", map[string]string{"X-Run-Id": "r-tool-freeze"})
	res := tlCall(t, cs, "delete", map[string]any{"path": "q"})
	ticket, _ := tlMeta(t, res)["ticket"].(string)
	time.Sleep(300 * time.Millisecond)
	tlDecide(t, g, ticket, "approve", "bob")
	rec := runRecord(t, g, "r-tool-freeze")
	if rec.DeadlineMs < 60250 {
		t.Fatalf("deadline %d ms: the paused time was not added", rec.DeadlineMs)
	}
}
