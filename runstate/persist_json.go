package runstate

import (
	"iter"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/haltline/haltline/wire/jsonscan"
)

// AppendJSON appends p as json.Marshal encodes it, byte for byte
// (TestPersistedAppendJSONIsMarshal), without reflection: a run's snapshot
// is written twice per model call, and a reflection-driven encoder costs
// the call a share of its CPU worth keeping (docs/performance.md). A field
// added to Persisted or the types it holds must be added here.
func (p *Persisted) AppendJSON(b []byte) []byte {
	b = appendStringField(b, `{"run_id":`, p.ID)
	b = appendStringField(b, `,"session_id":`, p.SessionID)
	b = appendOptionalString(b, `,"parent_run_id":`, p.ParentID)
	b = appendOptionalString(b, `,"agent_id":`, p.AgentID)
	b = appendOptionalString(b, `,"task_type":`, p.TaskType)
	b = appendOptionalString(b, `,"tenant":`, p.Tenant)
	b = appendOptionalString(b, `,"team":`, p.Team)
	b = appendOptionalString(b, `,"user":`, p.User)
	b = appendStringField(b, `,"state":`, string(p.State))
	c := &p.Counters
	b = appendIntField(b, `,"counters":{"agent_steps":`, c.AgentSteps)
	b = appendIntField(b, `,"model_calls":`, c.ModelCalls)
	b = appendIntField(b, `,"tool_calls":`, c.ToolCalls)
	b = appendIntField(b, `,"tool_attempts":`, c.ToolAttempts)
	b = appendIntField(b, `,"input_tokens":`, c.InputTokens)
	b = appendIntField(b, `,"output_tokens":`, c.OutputTokens)
	b = appendIntField(b, `,"reasoning_tokens":`, c.ReasoningTokens)
	b = appendIntField(b, `,"cached_tokens":`, c.CachedTokens)
	b = appendIntField(b, `,"cache_write_tokens":`, c.CacheWriteTokens)
	b = appendIntField(b, `,"loop_detector_hits":`, c.LoopHits)
	b = appendIntField(b, `},"estimated_cost_pusd":`, p.EstimatedCost)
	b = appendIntField(b, `,"actual_cost_pusd":`, p.ActualCost)
	b = appendIntField(b, `,"max_steps":`, p.MaxSteps)
	b = appendIntField(b, `,"deadline_ms":`, p.DeadlineMs)
	b = appendTimeField(b, `,"created":`, p.Created)
	b = appendIntField(b, `,"elapsed_ms":`, p.ElapsedMs)
	b = appendTimeField(b, `,"ended":`, p.Ended)
	if a := p.LastAction; a != nil {
		b = appendStringField(b, `,"last_action":{"tool":`, a.Tool)
		b = appendStringField(b, `,"arguments_hash":`, a.ArgumentsHash)
		b = append(b, '}')
	}
	b = appendOptionalString(b, `,"partial":`, p.Partial)
	if t := p.Termination; t != nil {
		b = appendStringField(b, `,"termination":{"reason":`, t.Reason)
		b = appendOptionalString(b, `,"detail":`, t.Detail)
		b = appendOptionalString(b, `,"detector":`, t.Detector)
		b = appendIntField(b, `,"step":`, t.Step)
		b = appendOptionalStrings(b, `,"evidence":`, t.Evidence)
		b = appendOptionalString(b, `,"mode":`, t.Mode)
		b = append(b, '}')
	}
	b = appendOptionalString(b, `,"resume_token":`, p.ResumeToken)
	if len(p.WouldTerminate) > 0 {
		b = append(b, `,"would_terminate":[`...)
		for i := range p.WouldTerminate {
			h := &p.WouldTerminate[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = appendStringField(b, `{"line":`, h.Line)
			b = appendIntField(b, `,"step":`, h.Step)
			b = appendOptionalString(b, `,"detector":`, h.Detector)
			b = appendOptionalString(b, `,"evidence":`, h.Evidence)
			b = appendStringField(b, `,"at":`, h.At)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendOptionalStrings(b, `,"child_run_ids":`, p.Children)
	if len(p.Outstanding) > 0 {
		b = append(b, `,"outstanding":{`...)
		for i, k := range sortedKeys(p.Outstanding) {
			if i > 0 {
				b = append(b, ',')
			}
			o := p.Outstanding[k]
			b = appendString(b, k)
			b = appendStringField(b, `:{"Name":`, o.Name)
			b = appendStringField(b, `,"Fingerprint":`, o.Fingerprint)
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	b = appendIntField(b, `,"last_event_seq":`, p.LastEventSeq)
	return append(b, '}')
}

// sortedKeys yields m's keys in order, as json.Marshal writes a map. A
// run has a few calls outstanding: they are found by selection, with no
// slice to allocate, and sorted in a slice past that.
func sortedKeys[V any](m map[string]V) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		if len(m) > 8 {
			for i, k := range slices.Sorted(maps.Keys(m)) {
				if !yield(i, k) {
					return
				}
			}
			return
		}
		var prev string
		for i := range len(m) {
			var next string
			found := false
			for k := range m {
				if (i == 0 || k > prev) && (!found || k < next) {
					next, found = k, true
				}
			}
			if !yield(i, next) {
				return
			}
			prev = next
		}
	}
}

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = jsonscan.AppendEscaped(b, s, true)
	return append(b, '"')
}

func appendStringField(b []byte, key, s string) []byte {
	return appendString(append(b, key...), s)
}

func appendOptionalString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendStringField(b, key, s)
}

// appendOptionalStrings writes a string array, none when it is empty
// (omitempty).
func appendOptionalStrings(b []byte, key string, ss []string) []byte {
	if len(ss) == 0 {
		return b
	}
	b = append(append(b, key...), '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}

// appendTimeField writes t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, trailing zeros cut) for the years it accepts.
func appendTimeField(b []byte, key string, t time.Time) []byte {
	b = append(append(b, key...), '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// AppendEventsJSON appends events as json.Marshal encodes the slice, byte
// for byte (TestEventsAppendJSONIsMarshal): a stored event record, which
// the pipeline rewrites with each persist's events while it is short. A
// field added to Event must be added here.
func AppendEventsJSON(b []byte, events []Event) []byte {
	b = append(b, '[')
	for i := range events {
		e := &events[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = appendIntField(b, `{"seq":`, e.Seq)
		b = appendStringField(b, `,"at":`, e.At)
		b = appendIntField(b, `,"elapsed_ms":`, e.ElapsedMs)
		b = appendStringField(b, `,"type":`, e.Type)
		b = appendOptionalString(b, `,"from":`, string(e.From))
		b = appendOptionalString(b, `,"to":`, string(e.To))
		b = appendIntField(b, `,"step":`, e.Step)
		b = appendOptionalString(b, `,"detail":`, e.Detail)
		b = appendOptionalString(b, `,"error":`, e.Error)
		b = appendOptionalString(b, `,"model":`, e.Model)
		b = appendOptionalInt(b, `,"input_tokens":`, e.InputTokens)
		b = appendOptionalInt(b, `,"output_tokens":`, e.OutputTokens)
		if e.CostUSD != 0 {
			b = jsonscan.AppendFloat(append(b, `,"cost_usd":`...), e.CostUSD)
		}
		b = appendOptionalInt(b, `,"status":`, int64(e.Status))
		b = appendOptionalString(b, `,"tool":`, e.Tool)
		b = appendOptionalString(b, `,"arguments_hash":`, e.ArgumentsHash)
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendOptionalInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendIntField(b, key, v)
}
