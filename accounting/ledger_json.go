package accounting

import (
	"strconv"
	"time"

	"github.com/haltline/haltline/wire/jsonscan"
)

// AppendJSON appends st as json.Marshal encodes it, byte for byte
// (TestLedgerStateAppendJSONIsMarshal), without reflection: the ledgers a
// run draws on are written with it at every persist, twice a model call.
// A field added to LedgerState or Vector must be added here.
func (st *LedgerState) AppendJSON(b []byte) []byte {
	b = append(b, `{"key":"`...)
	b = jsonscan.AppendEscaped(b, st.Key, true)
	b = st.Limit.appendJSON(append(b, `","limit":`...))
	b = st.FinalReserve.appendJSON(append(b, `,"final_reserve":`...))
	b = st.Spent.appendJSON(append(b, `,"spent":`...))
	b = st.Reserved.appendJSON(append(b, `,"reserved":`...))
	if st.PeriodNs != 0 {
		b = strconv.AppendInt(append(b, `,"period_ns":`...), st.PeriodNs, 10)
	}
	b = append(b, `,"window_start":"`...)
	b = st.WindowStart.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

// AppendJSON appends st as json.Marshal encodes it, byte for byte
// (TestReservationStateAppendJSONIsMarshal), without reflection: a call's
// hold is written with it at every model call. A field added to
// ReservationState must be added here.
func (st *ReservationState) AppendJSON(b []byte) []byte {
	b = strconv.AppendUint(append(b, `{"id":`...), st.ID, 10)
	b = append(b, `,"ledgers":`...)
	if st.Ledgers == nil {
		b = append(b, `null`...)
	} else {
		b = append(b, '[')
		for i, k := range st.Ledgers {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(jsonscan.AppendEscaped(append(b, '"'), k, true), '"')
		}
		b = append(b, ']')
	}
	b = st.Want.appendJSON(append(b, `,"want":`...))
	b = append(b, `,"expires":"`...)
	b = st.Expires.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

// appendJSON appends v as json.Marshal does: its zero members omitted.
func (v Vector) appendJSON(b []byte) []byte {
	b = append(b, '{')
	n := len(b)
	member := func(key string, x int64) {
		if x == 0 {
			return
		}
		if len(b) > n {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(b, key...), x, 10)
	}
	member(`"steps":`, v.Steps)
	member(`"tokens":`, v.Tokens)
	member(`"input_tokens":`, v.InputTokens)
	member(`"output_tokens":`, v.OutputTokens)
	member(`"tool_calls":`, v.ToolCalls)
	member(`"cost_pusd":`, int64(v.Cost))
	return append(b, '}')
}
