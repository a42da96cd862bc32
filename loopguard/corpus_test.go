package loopguard

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// trace is one recorded (or hand-built) run in testdata/traces.
type trace struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Kind        string `json:"kind"`       // "loop" or "healthy"
	Thresholds  string `json:"thresholds"` // "default" or "long"
	// SemanticHit marks a healthy trace the semantic detector flags: a
	// measured false positive of a detector that runs in shadow mode by
	// default. Any other detector's verdict on a healthy trace fails.
	SemanticHit bool `json:"semantic_hit"`
	Expect      *struct {
		Reason   string `json:"reason"`
		Detector string `json:"detector"`
		ByStep   int    `json:"by_step"`
	} `json:"expect"`
	Steps []struct {
		Calls []traceCall `json:"calls"`
	} `json:"steps"`
}

// traceCall holds arguments and result as sent on the wire. A JSON string is
// taken as the raw bytes it contains (OpenAI sends arguments that way; tool
// results are usually text); any other JSON value is taken verbatim.
type traceCall struct {
	ID        string          `json:"id"`
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    json.RawMessage `json:"result"`
}

func wireBytes(raw json.RawMessage) []byte {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return []byte(s)
		}
	}
	return raw
}

func loadTraces(t testing.TB) []trace {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "traces", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []trace
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tr trace
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tr); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if tr.Name+".json" != filepath.Base(f) {
			t.Fatalf("%s: name %q does not match the file name", f, tr.Name)
		}
		out = append(out, tr)
	}
	return out
}

// event is what the guard reported while replaying a trace.
type event struct {
	Step    int // the trace step being processed when the verdict came
	Verdict Verdict
}

// replay feeds a trace to a guard the way the pipeline does: a step's calls
// as soon as the model decides, each result when it comes back. With
// restart set, the guard is marshalled and restored into a fresh one after
// every event, as across gateway restarts.
func replay(t testing.TB, c *Canonicalizer, tr trace, restart bool) []event {
	t.Helper()
	th := DefaultThresholds()
	if tr.Thresholds == "long" {
		th = LongTaskThresholds()
	}
	g := NewGuard(th)
	reload := func() {
		if !restart {
			return
		}
		state, err := g.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		g = NewGuard(th)
		if err := g.UnmarshalBinary(state); err != nil {
			t.Fatal(err)
		}
	}
	var events []event
	note := func(step int, v *Verdict) {
		if v != nil {
			events = append(events, event{step, *v})
		}
	}
	for i, st := range tr.Steps {
		step := i + 1
		calls := make([]Call, len(st.Calls))
		for j, tc := range st.Calls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call-%d-%d", step, j)
			}
			agent := tc.Agent
			if agent == "" {
				agent = "agent"
			}
			args := wireBytes(tc.Arguments)
			calls[j] = Call{ID: id, Tool: tc.Tool, FP: c.Fingerprint(agent, tc.Tool, args), Sketch: c.Sketch(agent, tc.Tool, args)}
		}
		note(step, g.Step(step, calls))
		reload()
		for j, tc := range st.Calls {
			if tc.Result == nil {
				continue // the result never reached the gateway
			}
			note(step, g.Observe(calls[j].ID, c.Observation(wireBytes(tc.Result))))
			reload()
		}
	}
	return events
}

func TestCorpus(t *testing.T) {
	traces := loadTraces(t)
	c := NewCanonicalizer(nil)
	counts := map[string]int{}
	// hits[detector][kind] counts the traces on which the detector reported
	// at least once; read only after the subtests, which run in sequence.
	hits := map[string]map[string]int{}
	for _, tr := range traces {
		counts[tr.Kind]++
		t.Run(tr.Name, func(t *testing.T) {
			events := replay(t, c, tr, false)
			if again := replay(t, c, tr, true); !reflect.DeepEqual(events, again) {
				t.Errorf("verdicts differ across restarts:\n%+v\n%+v", events, again)
			}
			fired := map[string]bool{}
			for _, e := range events {
				fired[e.Verdict.Detector] = true
			}
			for d := range fired {
				if hits[d] == nil {
					hits[d] = map[string]int{}
				}
				hits[d][tr.Kind]++
			}
			switch tr.Kind {
			case "healthy":
				for _, e := range events {
					if e.Verdict.Detector != DetectorSemantic {
						t.Errorf("false positive at step %d: %+v", e.Step, e.Verdict)
					}
				}
				if fired[DetectorSemantic] != tr.SemanticHit {
					t.Errorf("semantic detector fired: %v, trace says semantic_hit: %v (%+v)", fired[DetectorSemantic], tr.SemanticHit, events)
				}
			case "loop":
				checkLoopTrace(t, tr, events)
			default:
				t.Fatalf("unknown kind %q", tr.Kind)
			}
		})
	}
	if counts["loop"] < 20 || counts["healthy"] < 20 {
		t.Errorf("corpus has %d loop and %d healthy traces, want at least 20 of each", counts["loop"], counts["healthy"])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| detector | loop traces hit (of %d) | healthy traces hit (of %d) |\n|---|---|---|\n", counts["loop"], counts["healthy"])
	for _, d := range []string{DetectorSameInRow, DetectorCycle, DetectorWindow, DetectorStall, DetectorSemantic} {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", d, hits[d]["loop"], hits[d]["healthy"])
	}
	t.Logf("traces on which each detector reported:\n%s", b.String())
}

// checkLoopTrace checks that the expected detector caught the loop in time.
// The semantic detector's verdicts are judged only on traces that expect
// it: it is a line of its own, and its verdicts consume none of the other
// detectors' evidence.
func checkLoopTrace(t *testing.T, tr trace, events []event) {
	t.Helper()
	if tr.Expect == nil {
		t.Fatal("loop trace without expect")
	}
	var first *event
	for i := range events {
		if (events[i].Verdict.Detector == DetectorSemantic) == (tr.Expect.Detector == DetectorSemantic) {
			first = &events[i]
			break
		}
	}
	if first == nil {
		t.Fatalf("loop not caught (expected %s/%s by step %d): %+v", tr.Expect.Reason, tr.Expect.Detector, tr.Expect.ByStep, events)
	}
	if first.Step > tr.Expect.ByStep || first.Verdict.Step > tr.Expect.ByStep {
		t.Errorf("caught at step %d, expected by step %d: %+v", first.Step, tr.Expect.ByStep, first.Verdict)
	}
	if first.Verdict.Reason != tr.Expect.Reason {
		t.Errorf("reason %q, want %q", first.Verdict.Reason, tr.Expect.Reason)
	}
	if tr.Expect.Detector != "" && first.Verdict.Detector != tr.Expect.Detector {
		t.Errorf("detector %q, want %q (%s)", first.Verdict.Detector, tr.Expect.Detector, first.Verdict.Detail)
	}
	if testing.Verbose() {
		t.Logf("caught at step %d of %d: %s", first.Step, len(tr.Steps), first.Verdict.Detail)
	}
}
