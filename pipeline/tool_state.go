package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// toolState is a run's tool governance. It lives in the run's governance
// for the run's whole life: idempotent results are never evicted (a lossy
// cache would let an L1/L2 call execute twice). Approvals, stored results
// and blobs are written to their own buckets once; Uses and the pause go
// with the run's snapshot.
type toolState struct {
	approvals map[string]*Approval // by ticket
	idem      map[string]*StoredResult
	inflight  map[string]bool
	blobs     map[string]string // handle → full text
	// Uses counts executions per tool, for Limits.ToolQuotas.
	Uses     map[string]int64
	PausedAt time.Time
	// serial orders the run's L1/L2 calls on the tool routes.
	serial serialQueue
}

// toolSnapshot is the part of toolState persisted with the run.
type toolSnapshot struct {
	Uses     map[string]int64 `json:"uses,omitempty"`
	PausedAt time.Time        `json:"paused_at"` // written even when zero (see runstate.Persisted.Ended)
}

func newToolState() *toolState {
	return &toolState{approvals: map[string]*Approval{}, idem: map[string]*StoredResult{},
		inflight: map[string]bool{}, blobs: map[string]string{}, Uses: map[string]int64{}}
}

func (g *governance) toolState() *toolState {
	if g.tools == nil {
		g.tools = newToolState()
	}
	return g.tools
}

func (ts *toolState) snapshot() *toolSnapshot {
	if ts == nil || (len(ts.Uses) == 0 && ts.PausedAt.IsZero()) {
		return nil
	}
	return &toolSnapshot{Uses: ts.Uses, PausedAt: ts.PausedAt}
}

func restoreToolState(s *toolSnapshot) *toolState {
	ts := newToolState()
	if s != nil {
		for k, v := range s.Uses {
			ts.Uses[k] = v
		}
		ts.PausedAt = s.PausedAt
	}
	return ts
}

// Lineage key kinds of tool governance.
const (
	// keyToolFP maps a tool name and an agent-free argument fingerprint of
	// an outstanding model tool call to its run: a tool request without run
	// headers is attributed by it (docs/design.md §3).
	keyToolFP = "tf:"
	// keyTicket and keyBlob find the run of an approval ticket or a blob.
	keyTicket = "ap:"
	keyBlob   = "bl:"
)

// toolFPKey is the lineage key of a tool call the model asked for, within
// its run's tenant.
func toolFPKey(tenant, name, fp string) string { return lineageKey(tenant, keyToolFP, name+":"+fp) }

// attributeTool finds the run a tool call belongs to: X-Run-Id, else the
// run whose outstanding tool calls hold the same tool name and argument
// fingerprint, else a new run — all within the caller's tenant, as for a
// model call (identify).
func (p *Pipeline) attributeTool(ctx context.Context, call *ToolCall) (*runstate.Run, bool, error) {
	tenant := call.Principal.Tenant
	ident := &Call{AgentID: call.AgentID, ParentRunID: call.ParentRunID, TaskType: call.TaskType, Principal: call.Principal}
	if call.RunID != "" {
		id := runstate.ScopedID(tenant, call.RunID)
		if r, err := p.getRun(id); r != nil || err != nil {
			return r, false, err
		}
		r, created := p.runs.GetOrCreate(p.identity(ident, id, call.SessionID))
		return r, created, nil
	}
	// Each canonicalizer in use (one per set of volatile keys) may have
	// indexed the call.
	p.canonMu.Lock()
	canons := make([]func(string, string, []byte) string, 0, len(p.canons))
	for _, c := range p.canons {
		canons = append(canons, func(a, n string, b []byte) string { return c.Fingerprint(a, n, b).String() })
	}
	p.canonMu.Unlock()
	for _, fp := range canons {
		r, err := p.lookup(toolFPKey(tenant, call.Name, fp("", call.Name, call.Arguments)))
		if err != nil {
			return nil, false, err
		}
		if r == nil {
			continue
		}
		r.Lock()
		state := r.State
		r.Unlock()
		// A completed run's calls are history; a new call starts a new task.
		if state != runstate.Completed && state != runstate.CompletedWithDegradation {
			return r, false, nil
		}
	}
	r, created := p.runs.GetOrCreate(p.identity(ident, p.newRunID(tenant), call.SessionID))
	return r, created, nil
}

// ToolEntry is what the gateway knows of a tool: its configured level and
// cost, and the input schema and annotations its server listed.
type ToolEntry struct {
	Level   string
	CostUSD float64
	Schema  json.RawMessage
	Hints   map[string]bool
}

// ToolRegistry holds the tools of every MCP server and HTTP tool. The
// front end fills it from config and from the servers' tools/list answers.
type ToolRegistry struct {
	mu      sync.RWMutex
	entries map[string]map[string]ToolEntry // server ("" for HTTP tools) → name
	// blobBase is the control plane's base URL, for the blob link in a
	// cut result; "" leaves the link relative.
	blobBase string
	// approvalTTL is how long a ticket waits for a decision.
	approvalTTL time.Duration
}

// DefaultApprovalTTL is how long an approval ticket lives without a decision.
const DefaultApprovalTTL = time.Hour

// registries hold each pipeline's tool registry. A side table keeps the
// tool work in its own files without widening Pipeline's struct.
var registries sync.Map // *Pipeline → *ToolRegistry

// ToolRegistry returns the pipeline's tool registry.
func (p *Pipeline) ToolRegistry() *ToolRegistry {
	if v, ok := registries.Load(p); ok {
		return v.(*ToolRegistry)
	}
	v, _ := registries.LoadOrStore(p, &ToolRegistry{entries: map[string]map[string]ToolEntry{}, approvalTTL: DefaultApprovalTTL})
	return v.(*ToolRegistry)
}

// Declare sets a tool's configured level and cost.
func (tr *ToolRegistry) Declare(server, name, level string, costUSD float64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	m := tr.server(server)
	e := m[name]
	e.Level, e.CostUSD = level, costUSD
	m[name] = e
}

// Learn records a tool's input schema and annotations from its server's
// tools/list answer; config keeps its level.
func (tr *ToolRegistry) Learn(server, name string, schema json.RawMessage, hints map[string]bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	m := tr.server(server)
	e := m[name]
	e.Schema, e.Hints = schema, hints
	m[name] = e
}

// Known reports whether a server's schemas were learned.
func (tr *ToolRegistry) Known(server, name string) bool {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	e, ok := tr.entries[server][name]
	return ok && e.Schema != nil
}

// SetBlobBaseURL sets the control plane's base URL for blob links.
func (tr *ToolRegistry) SetBlobBaseURL(u string) {
	tr.mu.Lock()
	tr.blobBase = u
	tr.mu.Unlock()
}

// SetApprovalTTL sets how long a ticket waits for a decision.
func (tr *ToolRegistry) SetApprovalTTL(d time.Duration) {
	if d <= 0 {
		d = DefaultApprovalTTL
	}
	tr.mu.Lock()
	tr.approvalTTL = d
	tr.mu.Unlock()
}

func (tr *ToolRegistry) server(s string) map[string]ToolEntry {
	m := tr.entries[s]
	if m == nil {
		m = map[string]ToolEntry{}
		tr.entries[s] = m
	}
	return m
}

func (tr *ToolRegistry) lookup(server, name string) ToolEntry {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	return tr.entries[server][name]
}

// resolve finds the server of a tool a model named: the one server that
// has it (a model names tools without their server), else none.
func (tr *ToolRegistry) resolve(name string) (string, ToolEntry) {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	server, found := "", 0
	var entry ToolEntry
	for s, m := range tr.entries {
		if e, ok := m[name]; ok {
			server, entry = s, e
			found++
		}
	}
	if found != 1 {
		return "", ToolEntry{}
	}
	return server, entry
}

func (tr *ToolRegistry) settings() (string, time.Duration) {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	return tr.blobBase, tr.approvalTTL
}

// queueIdem writes a stored result to the Idempotency bucket.
func (p *Pipeline) queueIdem(runID string, g *governance, key string, res *StoredResult) {
	if p.opts.Store == nil {
		return
	}
	if v, err := json.Marshal(res); err == nil {
		g.queue(store.Op{Bucket: store.Idempotency, Key: idemStoreKey(runID, key), Value: v})
	}
}

func idemStoreKey(runID, key string) []byte {
	return append(append([]byte(runID), 0), key...)
}

// blobRecord is a blob as stored.
type blobRecord struct {
	RunID string `json:"run_id"`
	Text  string `json:"text"`
}

// restoreTools brings back the approval tickets still open, with their
// runs (such a run stays in memory, where tickets are decided and used).
// Closed tickets, stored results and blobs are not read here: a run reads
// its stored results when it is loaded (loadStoredResults), and closed
// tickets and blobs are read from the store when asked for (ticketRun,
// Blob).
func (p *Pipeline) restoreTools(st store.Store) error {
	now := p.now()
	return st.Scan(store.Approvals, func(k, v []byte) error {
		var a Approval
		if json.Unmarshal(v, &a) != nil || !a.open(now) {
			return nil
		}
		r, err := p.getRun(a.RunID)
		if r == nil || err != nil {
			return nil
		}
		r.Lock()
		if g := govOf(r); g != nil {
			g.toolState().approvals[a.Ticket] = &a
		}
		r.Unlock()
		p.runs.Index(keyTicket+a.Ticket, a.RunID)
		return nil
	})
}

// storedResult reads an idempotency record (run id \x00 call key → result).
func storedResult(k, v []byte) (runID, key string, res *StoredResult, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return "", "", nil, false
	}
	res = &StoredResult{}
	if json.Unmarshal(v, res) != nil {
		return "", "", nil, false
	}
	return string(k[:i]), string(k[i+1:]), res, true
}

// loadStoredResults puts a run's stored tool results back into its tool
// state when the run comes back from the store: a repeated call of a
// resumed run is still answered from them, never executed twice.
//
// A run whose snapshot has no tool state never had a tool call forwarded
// (forwardTool counts each in its uses), so it has no stored result to
// read: most runs, whose agents call their tools themselves. Their load
// skips the read, a Redis round trip or a bbolt transaction a run.
func (p *Pipeline) loadStoredResults(g *governance, b *runBlob) error {
	if b.Tools == nil {
		return nil
	}
	runID := b.Run.ID
	return p.opts.Store.ScanPrefix(store.Idempotency, idemStoreKey(runID, ""), func(k, v []byte) error {
		if _, key, res, ok := storedResult(k, v); ok {
			g.toolState().idem[key] = res
		}
		return nil
	})
}
