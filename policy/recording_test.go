package policy

import (
	"context"
	"testing"
)

// The recording question: off by default, per tenant/team/task type, its
// bounds defaulted, and a malformed answer refused at load.
func TestRecordingAnswer(t *testing.T) {
	t.Parallel()
	red := RunInput{Principal: Principal{Team: "red"}}
	cases := []struct {
		desc    string
		data    map[string]any
		in      RunInput
		want    RecordingAnswer
		loadErr bool
	}{
		{"off by default", nil, red, RecordingAnswer{Sample: 1, MaxCalls: DefaultRecordingMaxCalls, RetentionDays: DefaultRecordingRetentionDays}, false},
		{"team on, sampled, with content", map[string]any{"recordings": map[string]any{"teams": map[string]any{
			"red": map[string]any{"enabled": true, "sample": 0.5, "content": true}}}}, red,
			RecordingAnswer{Enabled: true, Sample: 0.5, Content: true, MaxCalls: DefaultRecordingMaxCalls, RetentionDays: DefaultRecordingRetentionDays}, false},
		{"other team stays off", map[string]any{"recordings": map[string]any{"teams": map[string]any{
			"blue": map[string]any{"enabled": true}}}}, red,
			RecordingAnswer{Sample: 1, MaxCalls: DefaultRecordingMaxCalls, RetentionDays: DefaultRecordingRetentionDays}, false},
		{"bounds", map[string]any{"recordings": map[string]any{"enabled": true, "max_calls": 20, "retention_days": 2}}, red,
			RecordingAnswer{Enabled: true, Sample: 1, MaxCalls: 20, RetentionDays: 2}, false},
		{"sample above one", map[string]any{"recordings": map[string]any{"enabled": true, "sample": 2}}, red, RecordingAnswer{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e, err := New(context.Background(), Options{Data: tc.data})
			if tc.loadErr {
				if err == nil {
					t.Fatal("a malformed recording answer loaded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Recording(context.Background(), tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
