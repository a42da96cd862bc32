package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire/openai"
)

// storedPipeline is a pipeline with the default policies on a bbolt store
// that does not checkpoint during a test.
func storedPipeline(t testing.TB) *Pipeline {
	t.Helper()
	st, err := store.OpenBoltWith(t.TempDir(), store.BoltOptions{CheckpointEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pol, err := policy.New(context.Background(), policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Policy: pol, Store: st})
}

// encodeRun writes the same bytes as encoding the whole runBlob: restores,
// replicas and older readers decode it as the blob.
func TestEncodeRunMatchesTheBlob(t *testing.T) {
	p := storedPipeline(t)
	ctx := context.Background()
	for k := range 3 {
		body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"step %d"}]}`, k)
		resp := fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"search","arguments":"{\"q\":%d}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110}}`, k, k, k)
		tr := p.Begin(ctx, &Call{Body: body, RunID: "enc<&>\u2028"}, openai.Chat{})
		if tr.Answer != nil {
			t.Fatalf("refused: %s", tr.Answer.Body)
		}
		p.Finish(ctx, tr, Outcome{Status: 200, Body: resp})
	}
	r := p.runs.Get("enc<&>\u2028")
	g := govOf(r)
	if g == nil {
		t.Fatal("no governance")
	}
	g.tools = &toolState{Uses: map[string]int64{"search": 3}, PausedAt: time.Unix(1700000000, 0).UTC()}
	for _, withTools := range []bool{true, false} {
		if !withTools {
			g.tools = nil
		}
		run := r.Export(p.now())
		got, err := encodeRun(&run, g)
		if err != nil {
			t.Fatal(err)
		}
		blob := runBlob{Run: run, Limits: g.limits, Term: g.term, Loop: g.loop, Budgeted: g.budgeted, Ledgers: g.ledgers,
			OwnsAll: g.ownsAll, Tools: g.tools.snapshot(), Version: g.version, Context: g.ctx}
		if b, err := g.guard.MarshalBinary(); err == nil {
			blob.Guard = b
		}
		want, err := encode(blob)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("tools=%v:\n got %s\nwant %s", withTools, got, want)
		}
	}
	if g.static == nil {
		t.Fatal("the fixed part was not kept")
	}
}

// Records written before stay readable: a run's snapshot (ended by a line,
// with shadow hits, a last action, tool calls outstanding, tool state and
// its loop guard), its timeline and a ledger with every member set, as
// stored by an earlier build, decode (goccy) into the values encoding/json
// reads, which encode back to the same bytes; a record of an unknown
// format is refused, not guessed at.
func TestDecodeReadsStoredRecords(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.TrimSuffix(b, []byte("\n"))
	}
	same := func(name string, stored []byte, v any) {
		t.Helper()
		if err := decode(stored, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		std := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := json.Unmarshal(stored, std); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v, std) {
			t.Fatalf("%s decoded differently:\n goccy %+v\n std   %+v", name, v, std)
		}
		again, err := encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, stored) {
			t.Fatalf("%s encodes back differently:\n stored %s\n now    %s", name, stored, again)
		}
	}
	var b runBlob
	same("run", read("record-v1-run.json"), &b)
	if b.Run.ID != "dec<&>\u2028" || b.Run.Termination == nil || len(b.Run.Outstanding) == 0 ||
		len(b.Run.WouldTerminate) != 1 || b.Tools == nil || b.Tools.Uses["search"] != 3 || len(b.Guard) == 0 {
		t.Fatalf("run read back as %+v", b)
	}
	var events []runstate.Event
	same("events", read("record-v1-events.json"), &events)
	if len(events) < 5 {
		t.Fatalf("events read back: %d", len(events))
	}
	var l accounting.LedgerState
	same("ledger", read("record-v1-ledger.json"), &l)
	if vec := (accounting.Vector{Steps: 3, Tokens: 4, InputTokens: 5, OutputTokens: 6, ToolCalls: 7, Cost: 8}); l.Spent != vec || l.Key != "team:t\u00e9:daily" {
		t.Fatalf("ledger read back as %+v", l)
	}
	for _, rec := range [][]byte{[]byte("\x02{}"), []byte("v2:{}")} {
		if err := decode(rec, &b); err == nil {
			t.Fatalf("decode(%q) read a record of an unknown format", rec)
		}
	}
}

// A hold's key is the process's epoch and the hold's id as fmt's
// %016x-%016x would write them, then its run; holdOf reads back both the
// epoch and the run, and reads a key without a run (as written before the
// run was part of it) as one.
func TestReservationKeyIsFmts(t *testing.T) {
	for _, c := range [][2]uint64{{0, 0}, {1, 15}, {uint64(time.Now().UnixNano()), 1 << 40}, {1<<63 - 1, ^uint64(0)}} {
		p := &Pipeline{epoch: int64(c[0])}
		for _, run := range []string{"r-1", "a-b-c", "\x00"} {
			key := p.reservationKey(c[1], run)
			if got, want := string(key), fmt.Sprintf("%016x-%016x-%s", int64(c[0]), c[1], run); got != want {
				t.Fatalf("%q, want %q", got, want)
			}
			if epoch, gotRun, ok := holdOf(key); !ok || epoch != c[0] || gotRun != run {
				t.Fatalf("holdOf(%q) = %x, %q, %v", key, epoch, gotRun, ok)
			}
		}
		old := fmt.Appendf(nil, "%016x-%016x", int64(c[0]), c[1])
		if epoch, run, ok := holdOf(old); !ok || epoch != c[0] || run != "" {
			t.Fatalf("holdOf(%q) = %x, %q, %v", old, epoch, run, ok)
		}
	}
	for _, bad := range []string{"", "0123", "zzzzzzzzzzzzzzzz-0000000000000000", "0000000000000000+0000000000000000"} {
		if _, _, ok := holdOf([]byte(bad)); ok {
			t.Fatalf("holdOf(%q) read a hold's key", bad)
		}
	}
}

// BenchmarkEncodeRun is the snapshot written at every persist (twice a
// model call): a run after three steps of the harness's agent loop.
func BenchmarkEncodeRun(b *testing.B) {
	p := storedPipeline(b)
	ctx := context.Background()
	const id = "r-encode"
	for k := range 3 {
		body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"step %d"}],"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]}`, k)
		resp := fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"search","arguments":"{\"q\":%d}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":18,"total_tokens":918}}`, k, k, k)
		tr := p.Begin(ctx, &Call{Body: body, RunID: id}, openai.Chat{})
		p.Finish(ctx, tr, Outcome{Status: 200, Body: resp})
	}
	r := p.runs.Get(id)
	r.Lock()
	defer r.Unlock()
	g, now := govOf(r), p.now()
	b.ReportAllocs()
	for b.Loop() {
		run := r.Export(now)
		if _, err := encodeRun(&run, g); err != nil {
			b.Fatal(err)
		}
	}
}

// A run's events go into its last record while it is short: a run of ten
// steps writes a handful of records, none longer than eventsPerRecord,
// whose concatenation is its whole timeline, in order.
func TestEventRecordsAreExtended(t *testing.T) {
	p := storedPipeline(t)
	ctx := context.Background()
	const id, steps = "r-records", 10
	for k := range steps {
		body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"step %d"}],"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]}`, k)
		resp := fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"search","arguments":"{\"q\":%d}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":18,"total_tokens":918}}`, k, k, k)
		tr := p.Begin(ctx, &Call{Body: body, RunID: id}, openai.Chat{})
		if tr.Answer != nil {
			t.Fatalf("step %d refused: %s", k, tr.Answer.Body)
		}
		p.Finish(ctx, tr, Outcome{Status: 200, Body: resp})
	}
	var seqs []int64
	records := 0
	err := p.opts.Store.ScanPrefix(store.Events, append([]byte(id), 0), func(k, v []byte) error {
		var evs []runstate.Event
		if err := json.Unmarshal(v, &evs); err != nil {
			return err
		}
		if len(evs) == 0 || len(evs) > eventsPerRecord || !bytes.Equal(k, store.EventKey(id, evs[0].Seq)) {
			t.Errorf("record %q holds %d events", k, len(evs))
		}
		records++
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("stored timeline %v", seqs)
		}
	}
	if len(seqs) < 3*steps || records > steps*2/3 {
		t.Fatalf("%d events in %d records for %d steps", len(seqs), records, steps)
	}
}

// storedVersion reads the version decode would, without decoding: from
// real snapshots (the run's own members hold no "version" of their own,
// but a tool's name or a detail may say it) and from hand-made ones.
func TestStoredVersion(t *testing.T) {
	p := storedPipeline(t)
	ctx := context.Background()
	var blobs [][]byte
	for k := range 3 {
		body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"\"version\":%d"}]}`, 90+k)
		resp := fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"version","arguments":"{\"version\":%d}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110}}`, k, k, 70+k)
		tr := p.Begin(ctx, &Call{Body: body, RunID: "r-version"}, openai.Chat{})
		if tr.Answer != nil {
			t.Fatalf("refused: %s", tr.Answer.Body)
		}
		p.Finish(ctx, tr, Outcome{Status: 200, Body: resp})
		v, err := p.opts.Store.Get(store.Runs, []byte("r-version"))
		if err != nil || v == nil {
			t.Fatalf("stored snapshot: %q %v", v, err)
		}
		blobs = append(blobs, v)
	}
	for i, v := range blobs {
		var b runBlob
		if err := decode(v, &b); err != nil {
			t.Fatal(err)
		}
		got, ok := storedVersion(v)
		if !ok || got != b.Version || b.Version == 0 {
			t.Fatalf("snapshot %d: storedVersion %d %v, decode %d", i, got, ok, b.Version)
		}
	}
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`{"run":{"version":9},"version":3}`, 3, true},
		{` { "version" : 12 , "context" : {"version":1} } `, 12, true},
		{`{"run":{}}`, 0, false},      // none: decode decides
		{`{"version":"3"}`, 0, false}, // not a number
		{`{"version":3`, 0, false},    // cut off
		{`{"version":1e3}`, 0, false}, // not an integer
		{`[{"version":3}]`, 0, false}, // not an object
		{`{"version":9223372036854775808}`, 0, false},
	} {
		got, ok := storedVersion([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// When storedVersion answers, decode reads the same version.
func FuzzStoredVersion(f *testing.F) {
	f.Add([]byte(`{"run":{"version":9},"version":3}`))
	f.Add([]byte(`{"version":-1,"version":2}`))
	f.Add([]byte(`{"version":0}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ok := storedVersion(v)
		if !ok {
			return
		}
		var b struct {
			Version int64 `json:"version"`
		}
		if err := decode(v, &b); err != nil {
			return // storedVersion only delimits what it skips
		}
		if b.Version != got {
			t.Fatalf("%q: storedVersion %d, decode %d", v, got, b.Version)
		}
	})
}
