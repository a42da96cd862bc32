package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// recordingKeys are the answer keys of haltline.recording.
var recordingKeys = []string{"enabled", "sample", "content", "max_calls", "retention_days"}

// RecordingAnswer says whether a run is recorded for replay (issue 11) and
// how; asked once when the run starts. The zero value records nothing: a
// gateway keeps no trace of a run unless a policy asks for it.
type RecordingAnswer struct {
	Enabled bool `json:"enabled"`
	// Sample is the fraction of enabled runs that are recorded, in [0, 1].
	Sample float64 `json:"sample"`
	// Content keeps prompts and tool arguments in clear; otherwise only
	// hashes and sizes are kept.
	Content bool `json:"content"`
	// MaxCalls bounds the calls kept per recording; later calls are counted
	// but not kept.
	MaxCalls int64 `json:"max_calls"`
	// RetentionDays drops a recording that many days after its run ended.
	RetentionDays int64 `json:"retention_days"`
}

// Defaults of the bounds when the policy enables recording without them.
const (
	DefaultRecordingMaxCalls      = 500
	DefaultRecordingRetentionDays = 7
)

func decodeRecording(v ast.Value) (RecordingAnswer, error) {
	a := RecordingAnswer{Sample: 1, MaxCalls: DefaultRecordingMaxCalls, RetentionDays: DefaultRecordingRetentionDays}
	d, err := newDecoder(packages[qRecording], v)
	if err != nil {
		return a, err
	}
	for _, step := range []error{
		d.bool("enabled", &a.Enabled), d.fraction("sample", &a.Sample), d.bool("content", &a.Content),
		d.int64("max_calls", &a.MaxCalls), d.int64("retention_days", &a.RetentionDays),
	} {
		if step != nil {
			return RecordingAnswer{}, step
		}
	}
	return a, nil
}

// Recording says whether and how a run is recorded; asked once per run.
func (e *Engine) Recording(ctx context.Context, in RunInput) (RecordingAnswer, error) {
	s, start := e.begin()
	a, o, err := ask(ctx, s, qRecording, &in, nil, nil, func() (RecordingAnswer, error) {
		v, err := s.evalFresh(ctx, qRecording, runValue(in, s))
		if err != nil {
			return RecordingAnswer{}, err
		}
		return decodeRecording(v)
	})
	if e.opts.DecisionLog != nil {
		e.logDecisionFrom(s, start, qRecording, in, "", "", "", o, err, func() string {
			return fmt.Sprintf("enabled=%t sample=%g content=%t", a.Enabled, a.Sample, a.Content)
		})
	}
	return a, err
}

// Retention is how long a recording is kept after its run ended.
func (a RecordingAnswer) Retention() time.Duration {
	return time.Duration(a.RetentionDays) * 24 * time.Hour
}
