package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/haltline/haltline/runstate"
)

// storedFinal reads the run's state as a full decode of the snapshot
// would, wherever the members are and whatever surrounds them.
func TestStoredFinal(t *testing.T) {
	for _, c := range []struct {
		blob  string
		final bool
	}{
		{`{"run":{"run_id":"r-1","session_id":"s","state":"completed","counters":{}},"limits":{}}`, true},
		{`{"run":{"run_id":"r-1","state":"completed_with_degradation"}}`, true},
		{`{"run":{"state":"terminated"}}`, true},
		{`{"run":{"state":"failed"}}`, true},
		{`{"run":{"state":"cancelled"}}`, true},
		{` { "limits" : {"state":"completed"} , "run" : { "tools":["state"], "state" : "completed" } } `, true},
		{`{"run":{"state":"ready"}}`, false},
		{`{"run":{"state":"deciding"}}`, false},
		{`{"run":{"state":"paused"}}`, false},
		{`{"run":{"state":"executing_tools"}}`, false},
		{`{"run":{"run_id":"r-1"}}`, false},                   // no state: loaded, the decode decides
		{`{"limits":{"state":"completed"}}`, false},           // not the run's
		{`{"run":{"counters":{"state":"completed"}}}`, false}, // nested deeper
		{`{"run":"completed"}`, false},
		{`{"run":{"state":"complet\u0065d"}}`, false}, // escaped: read as written, so loaded
		{`{"run":{"state":completed}}`, false},
		{`{"run":{"state":"completed"`, false}, // cut: the decode reports it
		{`{"run":{"state":"completed"},"run":{"state":"ready"}}`, false},
		{`{"run":{"state":"ready","state":"completed"}}`, true},
		{`{"run":{"state":"completed","state":1}}`, false},
		{`{"run":{"state":"completed","State":"ready"}}`, false}, // a decode folds case
		{`{"run":{"state":"completed","\u017ftate":"ready"}}`, false},
		{`{"run":{"state":"completed","st\u0061te":"ready"}}`, false},
		{`{"RUN":{"state":"ready"},"run":{"state":"completed"}}`, false},
		{`not json`, false},
		{``, false},
	} {
		if got := storedFinal([]byte(c.blob)); got != c.final {
			t.Errorf("storedFinal(%s) = %v, want %v", c.blob, got, c.final)
		}
	}
}

// FuzzStoredFinal: never a panic, and a snapshot storedFinal calls final
// decodes, with encoding/json, to a final run. (The converse need not
// hold: what it cannot read is loaded, and the decode decides.)
func FuzzStoredFinal(f *testing.F) {
	for _, s := range []string{
		`{"run":{"run_id":"r-1","state":"completed"},"limits":{}}`,
		`{"run":{"state":"ready"}}`,
		`{"limits":{"state":"completed"},"run":{"state":"terminated"}}`,
		`{"run":{"state":"completed","state":"ready"}}`,
		`{"run":{"state":"completed","State":"ready"}}`,
		`{"run":{"state":"completed","st\u0061te":"ready"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !storedFinal(v) || !json.Valid(v) {
			return
		}
		var b struct {
			Run struct {
				State runstate.State `json:"state"`
			} `json:"run"`
		}
		if err := json.Unmarshal(v, &b); err != nil {
			return // a shape the decode refuses: Restore skips it, the store keeps it
		}
		if !b.Run.State.Final() {
			t.Fatalf("storedFinal(%s) but the decode reads state %q", v, b.Run.State)
		}
	})
}
