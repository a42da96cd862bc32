package redisbook

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

// The retention sweep deletes, from either store, everything of the runs
// that ended before the retention and left memory — snapshot, timeline,
// own ledger, lineage keys, stored tool results, tickets, blobs — and
// nothing of the others: a run that ended since, a run in progress, a
// team window's ledger.
func TestRetentionSweep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (store.Store, accounting.Book, pipeline.RunLock)
	}{
		{"bbolt", func(t *testing.T) (store.Store, accounting.Book, pipeline.RunLock) {
			st, err := store.OpenBolt(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st, accounting.NewMemBook(), nil
		}},
		{"redis", func(t *testing.T) (store.Store, accounting.Book, pipeline.RunLock) {
			book, st := openOne(t)
			return st, book, RunLock[store.Op]{Locker: st, Book: book}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, book, lock := tc.open(t)
			retentionSweep(t, st, book, lock)
		})
	}
}

func retentionSweep(t *testing.T, st store.Store, book accounting.Book, lock pipeline.RunLock) {
	clock := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	pol, err := policy.New(context.Background(), policy.Options{Data: map[string]any{"tools": map[string]any{
		"fs": map[string]any{"read": map[string]any{"level": "L0"}, "delete": map[string]any{"level": "L2"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline.New(pipeline.Options{Policy: pol, Book: book, Store: st, RunLock: lock, Now: now,
		StoreRetention: 24 * time.Hour})
	p.ToolRegistry().Declare("fs", "read", "L0", 0)
	p.ToolRegistry().Declare("fs", "delete", "L2", 0)
	ctx := context.Background()
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Do the task."}]}`)
	answer := func(callID string) []byte {
		if callID == "" {
			return []byte(benchResponse)
		}
		return []byte(`{"id":"chatcmpl-2","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"` + callID + `","type":"function","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}
	call := func(runID, toolCallID string) {
		t.Helper()
		turn := p.Begin(ctx, &pipeline.Call{Body: body, RunID: runID}, openai.Chat{})
		if turn.Answer != nil {
			t.Fatalf("%s refused: %s", runID, turn.Answer.Body)
		}
		p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: answer(toolCallID)})
	}
	// A run's tool calls through the gateway: a long result, cut and kept
	// as a blob, then a call held for approval, which is denied: that ends
	// the run. Its ticket and blob are stored under keys of their own.
	toolCalls := func(runID string) (ticket, blob string) {
		t.Helper()
		tool := func(name, text string) (*pipeline.ToolTurn, pipeline.StoredResult) {
			tt := p.BeginTool(ctx, &pipeline.ToolCall{Server: "fs", Name: name, Arguments: []byte(`{"path":"a"}`), RunID: runID})
			if tt.Answer != nil {
				return tt, pipeline.StoredResult{}
			}
			return tt, p.FinishTool(ctx, tt, pipeline.ToolOutcome{Text: text, Render: func(s string) pipeline.StoredResult {
				return pipeline.StoredResult{Status: 200, Body: []byte(`"` + s + `"`)}
			}})
		}
		if _, res := tool("read", strings.Repeat("a long tool result ", 500)); res.Handle == "" {
			t.Fatalf("%s: the long result was not cut", runID)
		} else {
			blob = res.Handle
		}
		tt, _ := tool("delete", "")
		if tt.Answer == nil || tt.Answer.Approval == nil {
			t.Fatalf("%s: the L2 call was not held for approval", runID)
		}
		ticket = tt.Answer.Approval.Ticket
		if _, err := p.Decide(ticket, "deny", "ops"); err != nil {
			t.Fatal(err)
		}
		return ticket, blob
	}
	idempotent := func(runID string) store.Op {
		return store.Op{Bucket: store.Idempotency, Key: []byte(runID + "\x00fs/write_file/abc"), Value: []byte(`{}`)}
	}
	call("r-old", "call_old")
	oldTicket, oldBlob := toolCalls("r-old")
	if err := <-st.Apply([]store.Op{idempotent("r-old"),
		{Bucket: store.Ledgers, Key: []byte("team:red:daily"), Value: []byte(`{"key":"team:red:daily"}`)}}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(48 * time.Hour)
	call("r-recent", "call_recent")
	recentTicket, recentBlob := toolCalls("r-recent")
	if err := <-st.Apply([]store.Op{idempotent("r-recent")}); err != nil {
		t.Fatal(err)
	}
	call("r-live", "call_live") // a tool call outstanding: in progress
	clock = clock.Add(time.Minute)
	p.SweepEnded()
	if p.Runs().Get("r-old") != nil || p.Runs().Get("r-recent") != nil {
		t.Fatal("setup: the ended runs did not leave memory")
	}

	n, err := p.SweepStored(true)
	if err != nil || n != 1 {
		t.Fatalf("swept %d runs, err %v; want r-old", n, err)
	}
	present := func(b store.Bucket, key string) bool {
		t.Helper()
		v, err := st.Get(b, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return v != nil
	}
	events := func(runID string) int {
		t.Helper()
		n := 0
		if err := st.ScanPrefix(store.Events, []byte(runID+"\x00"), func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		b    store.Bucket
		key  string
		want bool
	}{
		{store.Runs, "r-old", false}, {store.Approvals, oldTicket, false}, {store.Blobs, oldBlob, false},
		{store.Idempotency, "r-old\x00fs/write_file/abc", false}, {store.Lineage, "tc:call_old", false},
		{store.Runs, "r-recent", true}, {store.Approvals, recentTicket, true}, {store.Blobs, recentBlob, true},
		{store.Idempotency, "r-recent\x00fs/write_file/abc", true}, {store.Lineage, "tc:call_recent", true},
		{store.Runs, "r-live", true}, {store.Lineage, "tc:call_live", true}, {store.Ledgers, "team:red:daily", true},
	} {
		if got := present(c.b, c.key); got != c.want {
			t.Errorf("%s %q present %v after the sweep, want %v", c.b, c.key, got, c.want)
		}
	}
	if events("r-old") != 0 || events("r-recent") == 0 || events("r-live") == 0 {
		t.Errorf("events left: old %d, recent %d, live %d", events("r-old"), events("r-recent"), events("r-live"))
	}
	if _, ok, _ := p.Record("r-old"); ok {
		t.Error("r-old still has a record")
	}
	if rec, ok, _ := p.Record("r-recent"); !ok || rec.AgentSteps != 1 || rec.Reason != "approval_denied" {
		t.Errorf("r-recent: %+v %v", rec, ok)
	}
	if _, spent, _, err := book.Snapshot(ctx, "run:r-old", clock); err != nil || !spent.IsZero() {
		t.Errorf("r-old's ledger: spent %+v, err %v", spent, err)
	}
	if _, ok := book.(*accounting.MemBook); ok {
		if present(store.Ledgers, "run:r-old") || !present(store.Ledgers, "run:r-recent") {
			t.Error("stored run ledgers: r-old's kept or r-recent's lost")
		}
	} else if _, spent, _, err := book.Snapshot(ctx, "run:r-recent", clock); err != nil || spent.Steps != 1 {
		t.Errorf("r-recent's ledger: spent %+v, err %v", spent, err)
	}
	if n, err := p.SweepStored(false); n != 0 || err != nil {
		t.Errorf("a second sweep within the hour deleted %d runs (err %v)", n, err)
	}
}
