package runstate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// fullPersisted sets every member of Persisted, strings from s.
func fullPersisted(s string, n int64, at time.Time) Persisted {
	return Persisted{
		Identity: Identity{ID: s, SessionID: s + "-s", ParentID: s, AgentID: s, TaskType: s, Tenant: s, Team: s, User: s},
		State:    State(s),
		Counters: Counters{AgentSteps: n, ModelCalls: n + 1, ToolCalls: n + 2, ToolAttempts: n + 3, InputTokens: n + 4,
			OutputTokens: n + 5, ReasoningTokens: n + 6, CachedTokens: n + 7, CacheWriteTokens: n + 8, EstimatedCost: n, ActualCost: n, LoopHits: n + 9},
		EstimatedCost: n * 3, ActualCost: -n, MaxSteps: n, DeadlineMs: n, Created: at, ElapsedMs: n, Ended: at.Add(time.Duration(n)),
		LastAction:     &Action{Tool: s, ArgumentsHash: s},
		Partial:        s,
		Termination:    &Termination{Reason: s, Detail: s, Detector: s, Step: n, Evidence: []string{s, "", s + "2"}, Mode: s, ResumeToken: s},
		ResumeToken:    s,
		WouldTerminate: []ShadowHit{{Line: s, Step: n, Detector: s, Evidence: s, At: s}, {Line: "", At: ""}},
		Children:       []string{s, s + "\x1facme"},
		Outstanding:    map[string]OutstandingCall{s: {Name: s, Fingerprint: s}, s + "b": {}, "a" + s: {Name: "x", Fingerprint: "y"}},
		LastEventSeq:   n,
	}
}

// AppendJSON writes what json.Marshal writes: the snapshot format is read
// back by encoding/json and goccy alike.
func TestPersistedAppendJSONIsMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 1, 15, 8, 0, 1, 500, time.UTC)
	cases := map[string]Persisted{
		"zero":         {},
		"usual":        {Identity: Identity{ID: "r-1", SessionID: "s-1", Tenant: "acme"}, State: ExecutingTools, Created: at, Counters: Counters{AgentSteps: 3}, LastEventSeq: 12},
		"full":         fullPersisted("run", 42, at),
		"escapes":      fullPersisted("a\"b\\c\n\t\x01<>&\u2028\u2029é😀\xff", -7, at.In(time.FixedZone("x", 5*3600+1800))),
		"whole second": fullPersisted("w", 0, time.Date(2027, 1, 15, 8, 0, 1, 0, time.UTC)),
		"one outstanding": {Identity: Identity{ID: "r"}, Outstanding: map[string]OutstandingCall{"call_1": {Name: "read", Fingerprint: "f"}},
			WouldTerminate: []ShadowHit{{Line: "stalled"}}, Termination: &Termination{Reason: "deadline"}},
	}
	many := fullPersisted("m", 1, at)
	for i := range 12 { // sorted in a slice past 8
		many.Outstanding[fmt.Sprintf("call_%d", 11*i%12)] = OutstandingCall{Name: fmt.Sprint(i)}
	}
	cases["many outstanding"] = many
	for name, p := range cases {
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AppendJSON([]byte("prefix")); string(got) != "prefix"+string(want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got[len("prefix"):], want)
		}
	}
}

func FuzzPersistedAppendJSON(f *testing.F) {
	f.Add("r-1", "s", int64(3), int64(1_800_000_000_123))
	f.Add("<\u2028\xff\"", "", int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, a, b string, n, ns int64) {
		p := fullPersisted(a, n, time.Unix(0, ns%(1<<62)).UTC())
		p.SessionID, p.Partial = b, b
		p.Outstanding[b] = OutstandingCall{Name: a + b}
		want, err := json.Marshal(p)
		if err != nil {
			return // a time json.Marshal refuses
		}
		if got := p.AppendJSON(nil); string(got) != string(want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// fullPersisted sets every member, nested ones included: a field added to
// Persisted and not to AppendJSON then shows in
// TestPersistedAppendJSONIsMarshal even when it is omitempty.
func TestFullPersistedSetsEveryField(t *testing.T) {
	t.Parallel()
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		if v.IsZero() {
			t.Errorf("fullPersisted leaves %s zero", path)
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			walk(path, v.Elem())
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				return
			}
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.Slice:
			walk(path+"[0]", v.Index(0))
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				if !it.Value().IsZero() {
					walk(path+"[]", it.Value())
					return
				}
			}
		}
	}
	walk("Persisted", reflect.ValueOf(fullPersisted("x", 5, time.Now())))
}

func fullEvent(s string, n int64, cost float64) Event {
	return Event{Seq: n, At: s, ElapsedMs: n + 1, Type: s, From: State(s), To: State(s + "2"), Step: n + 2, Detail: s, Error: s + "3",
		Model: s, InputTokens: n + 3, OutputTokens: n + 4, CostUSD: cost, Status: int(n + 5), Tool: s, ArgumentsHash: s}
}

// AppendEventsJSON writes what json.Marshal writes for the slice.
func TestEventsAppendJSONIsMarshal(t *testing.T) {
	t.Parallel()
	for name, evs := range map[string][]Event{
		"none":    {},
		"nil":     nil,
		"zero":    {{}},
		"usual":   {{Seq: 1, At: "2027-01-15T08:00:01.5Z", Type: EventTransition, To: Ready, Detail: "run started"}, fullEvent("model_call", 2, 0.015006)},
		"costs":   {fullEvent("a", 1, 1e-7), fullEvent("b", 2, 1e21), fullEvent("c", 3, 123456789.125), fullEvent("d", 4, -2.5e-9), fullEvent("e", 5, 1e-6)},
		"escapes": {fullEvent("<\u2028\xff\"\\\n>", -1, 0.1)},
	} {
		want, err := json.Marshal(evs)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendEventsJSON([]byte("prefix"), evs); string(got) != "prefix"+string(want) && !(evs == nil && string(got) == "prefix[]") {
			t.Errorf("%s:\n got %s\nwant %s", name, got[len("prefix"):], want)
		}
	}
	v := reflect.ValueOf(fullEvent("x", 1, 0.5))
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullEvent leaves %s zero", v.Type().Field(i).Name)
		}
	}
}

func FuzzEventsAppendJSON(f *testing.F) {
	f.Add("model_call", int64(3), 0.015006)
	f.Add("<\u2028\xff\"", int64(-1), 1e-300)
	f.Fuzz(func(t *testing.T, s string, n int64, cost float64) {
		evs := []Event{fullEvent(s, n, cost), {Seq: n, Type: s}}
		want, err := json.Marshal(evs)
		if err != nil {
			return // NaN or an infinity, which json.Marshal refuses
		}
		if got := AppendEventsJSON(nil, evs); string(got) != string(want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkPersistedAppendJSON writes a run's snapshot as every persist
// does (twice a model call), by hand (append) and through encoding/json
// (marshal): the difference is what keeps the hand-written encoder.
func BenchmarkPersistedAppendJSON(b *testing.B) {
	p := fullPersisted("run-7f3a9c2e41d8", 12, time.Date(2027, 1, 15, 8, 0, 1, 500, time.UTC))
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			buf = p.AppendJSON(buf[:0])
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&p)
		}
	})
}
