package pipeline_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/haltline/haltline/loopguard"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/openai"
)

var replayStart = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// loopRecording is the incident as a recording: the same query every step
// (its fingerprint constant once the timestamp is dropped), "no data" back.
func loopRecording(id string, calls int) pipeline.Recording {
	canon := loopguard.NewCanonicalizer(nil)
	fp := canon.Fingerprint("", "query", []byte(`{"query":"level:error"}`))
	obs := canon.Observation([]byte("no data"))
	rec := pipeline.Recording{Version: pipeline.RecordingVersion, RunID: id, Started: replayStart.Format(time.RFC3339Nano),
		Outcome: pipeline.RecordedOutcome{Status: string(runstate.ExecutingTools), Step: int64(calls), Steps: int64(calls), ModelCalls: int64(calls)}}
	for i := range calls {
		c := pipeline.CallRecord{Seq: i + 1, API: wire.APIChat.String(), Model: "gpt-4o-mini", BodyBytes: 800 + 200*i,
			HasTools: true, Messages: 1 + 2*i, ElapsedMs: int64(1000 * i), DurationMs: 400, Status: 200,
			FinishReason: "tool_calls", HasUsage: true, Usage: wire.Usage{InputTokens: 1000, OutputTokens: 50},
			ToolCalls: []pipeline.ToolCallRecord{{ID: fmt.Sprintf("call_%d", i+1), Name: "query", Fingerprint: hex.EncodeToString(fp[:])}}}
		if i > 0 {
			c.Observations = []pipeline.Observation{{CallID: fmt.Sprintf("call_%d", i), Hash: hex.EncodeToString(obs[:]), Bytes: 7}}
		}
		rec.Calls = append(rec.Calls, c)
	}
	return rec
}

func enginePolicy(t testing.TB, data map[string]any) *policy.Engine {
	t.Helper()
	pol, err := policy.New(context.Background(), policy.Options{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// Replay ends a recorded run where the candidate's lines would have, and
// says when the candidate would let it run past what was recorded.
func TestReplayCandidates(t *testing.T) {
	t.Parallel()
	off := map[string]any{"same_in_row": 0, "window": 0, "window_repeats": 0, "max_cycle_period": 0, "stall_steps": 0}
	cases := []struct {
		desc    string
		data    map[string]any
		status  runstate.State
		reason  string
		step    int64
		beyond  bool
		changed bool
	}{
		{"defaults catch the loop", nil, runstate.Terminated, runstate.ReasonLoopDetected, 4, false, true},
		{"loops off, step cap", map[string]any{"loops": map[string]any{"defaults": off},
			"budgets": map[string]any{"defaults": map[string]any{"max_steps": 5}}}, runstate.CompletedWithDegradation, runstate.ReasonMaxSteps, 5, false, true}, // the last step is the wrap-up
		{"loops off", map[string]any{"loops": map[string]any{"defaults": off}}, runstate.ExecutingTools, "", 8, false, false},
		{"loop in shadow", map[string]any{"terminations": map[string]any{"enforcement": map[string]any{
			"loop_detected": "shadow", "stalled": "shadow"}}}, runstate.ExecutingTools, "", 8, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			rep, err := pipeline.Replay(context.Background(), pipeline.ReplayOptions{Policy: enginePolicy(t, tc.data)},
				[]pipeline.Recording{loopRecording("r-loop", 8)})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Runs[0]
			if got.Error != "" || got.Replayed.Status != string(tc.status) || got.Replayed.Reason != tc.reason ||
				got.Replayed.Step != tc.step || got.BeyondRecording != tc.beyond || got.Changed != tc.changed {
				t.Fatalf("replayed %+v (beyond %t, changed %t)", got.Replayed, got.BeyondRecording, got.Changed)
			}
			if tc.changed && (got.SavedUSD <= 0 || rep.Total.EndedEarlier != 1) {
				t.Fatalf("an earlier end saves spend: %+v", rep.Total)
			}
		})
	}
}

// A recorded run that the gateway ended, replayed under a policy that lets
// it go on, is flagged: the recording holds no answer past its end.
func TestReplayPastTheRecording(t *testing.T) {
	t.Parallel()
	rec := loopRecording("r-ended", 3)
	rec.Outcome = pipeline.RecordedOutcome{Status: string(runstate.Terminated), Reason: runstate.ReasonLoopDetected, Step: 3, ModelCalls: 3}
	pol := enginePolicy(t, map[string]any{"loops": map[string]any{"defaults": map[string]any{"same_in_row": 0, "window": 0,
		"window_repeats": 0, "max_cycle_period": 0, "stall_steps": 0}}})
	rep, err := pipeline.Replay(context.Background(), pipeline.ReplayOptions{Policy: pol}, []pipeline.Recording{rec})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Runs[0]; !r.BeyondRecording || !r.Changed || rep.Total.EndedLater != 1 {
		t.Fatalf("%+v / %+v", r, rep.Total)
	}
}

// A recording is persisted with its run, bounded by max_calls, read back by
// a new process, and dropped once past its retention.
func TestRecordingPersistsAndExpires(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := store.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clock := replayStart
	now := func() time.Time { return clock }
	pol := enginePolicy(t, map[string]any{"recordings": map[string]any{"enabled": true, "max_calls": 2, "retention_days": 1}})
	p := pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now})
	ctx := context.Background()
	for i := range 3 {
		turn := p.Begin(ctx, &pipeline.Call{API: wire.APIChat, Body: chatBody(2000), RunID: "r-rec"}, openai.Chat{})
		if turn.Answer != nil {
			t.Fatalf("call %d refused: %s", i, turn.Answer.Body)
		}
		body := finalResponse
		p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(body)})
		clock = clock.Add(time.Second)
	}
	// A new process over the same store holds no run, only the recording.
	p2 := pipeline.New(pipeline.Options{Policy: pol, Store: st, Now: now})
	recs, err := p2.Recordings(time.Time{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("recordings %v, %v", recs, err)
	}
	r := recs[0]
	if len(r.Calls) != 2 || !r.Truncated || r.Calls[0].Usage.InputTokens != 1000 || r.Calls[0].BodyBytes == 0 || r.Content {
		t.Fatalf("recording %+v", r)
	}
	clock = clock.Add(25 * time.Hour)
	if n := p2.SweepRecordings(true); n != 1 {
		t.Fatalf("swept %d", n)
	}
	if recs, _ := p2.Recordings(time.Time{}); len(recs) != 0 {
		t.Fatalf("expired recording still exported: %+v", recs)
	}
}

// Replay throughput: a thousand recorded runs of ten calls each, replayed
// through the pipeline under the default policies.
func BenchmarkReplay1000Runs(b *testing.B) {
	recs := make([]pipeline.Recording, 1000)
	for i := range recs {
		recs[i] = loopRecording(fmt.Sprintf("r-%d", i), 10)
	}
	pol := enginePolicy(b, map[string]any{"loops": map[string]any{"defaults": map[string]any{"same_in_row": 0, "window": 0,
		"window_repeats": 0, "max_cycle_period": 0, "stall_steps": 0}}})
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	runs := 0
	for b.Loop() {
		rep, err := pipeline.Replay(ctx, pipeline.ReplayOptions{Policy: pol}, recs)
		if err != nil || rep.Total.Errors > 0 {
			b.Fatal(err, rep.Total)
		}
		runs += len(recs)
	}
	b.ReportMetric(float64(runs)/time.Since(start).Seconds(), "runs/s")
}
