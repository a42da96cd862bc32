package pipeline

import (
	"testing"

	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/wire"
)

// A replayed call reserves on the estimate its recording carries; a
// recording made before it did falls back to its body when content was
// kept, else to its size.
func TestRecordedEstimate(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Read the report and list the late orders."}]}`)
	for _, tc := range []struct {
		desc string
		rec  CallRecord
		want int64
	}{
		{"recorded", CallRecord{InputEstimate: 42, Body: body, BodyBytes: len(body)}, 42},
		{"from the body", CallRecord{Body: body, BodyBytes: len(body)}, contextmgr.Estimate(wire.APIChat, body)},
		{"from the size", CallRecord{BodyBytes: 4001}, 1001},
	} {
		if got := recordedEstimate(wire.APIChat, &tc.rec); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.desc, got, tc.want)
		}
	}
}
