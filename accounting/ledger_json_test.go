package accounting

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func fullLedgerState(key string, n int64, at time.Time) LedgerState {
	v := Vector{Steps: n, Tokens: n + 1, InputTokens: n + 2, OutputTokens: n + 3, ToolCalls: n + 4, Cost: Money(n + 5)}
	return LedgerState{Key: key, Limit: v, FinalReserve: Vector{Cost: Money(n)}, Spent: v, Reserved: Vector{},
		PeriodNs: n, WindowStart: at}
}

// encodings returns what v.AppendJSON appends to a prefix and what
// json.Marshal writes after the same prefix: the two must be equal.
func encodings(v interface{ AppendJSON([]byte) []byte }) (got, want string, err error) {
	w, err := json.Marshal(v)
	return string(v.AppendJSON([]byte("prefix"))), "prefix" + string(w), err
}

// AppendJSON writes what json.Marshal writes: ledgers are read back by
// encoding/json and goccy alike.
func TestLedgerStateAppendJSONIsMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 1, 15, 8, 0, 1, 500, time.UTC)
	for name, st := range map[string]LedgerState{
		"zero":    {},
		"run":     {Key: "run:r-1", Limit: Vector{Steps: 20}, Spent: Vector{Steps: 3, Tokens: 2700, Cost: 15_006_000_000}},
		"full":    fullLedgerState("team:t1:daily", 86_400_000_000_000, at),
		"escapes": fullLedgerState("team:<é\u2028\xff\"\\>", -3, at.In(time.FixedZone("x", -3600))),
	} {
		got, want, err := encodings(&st)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	// Every field set, so that a field added and not written shows above.
	full := reflect.ValueOf(fullLedgerState("k", 1, at))
	for i := range full.NumField() {
		if f := full.Type().Field(i); f.Name != "Reserved" && full.Field(i).IsZero() {
			t.Errorf("fullLedgerState leaves %s zero", f.Name)
		}
	}
	v := reflect.ValueOf(fullLedgerState("k", 1, at).Limit)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullLedgerState leaves Limit.%s zero", v.Type().Field(i).Name)
		}
	}
}

func FuzzLedgerStateAppendJSON(f *testing.F) {
	f.Add("run:r-1", int64(3), int64(0), int64(1_800_000_000_123))
	f.Add("<\u2028\xff\"", int64(-1), int64(7), int64(0))
	f.Fuzz(func(t *testing.T, key string, n, m, ns int64) {
		st := fullLedgerState(key, n, time.Unix(0, ns%(1<<62)).UTC())
		st.Reserved = Vector{Steps: m, Cost: Money(m * n)}
		if got, want, err := encodings(&st); err == nil && got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkLedgerStateAppendJSON is a run ledger's record, written at
// every persist.
// BenchmarkLedgerStateAppendJSON writes a run's ledger as every persist
// does, by hand (append) and through encoding/json (marshal): the
// difference is what keeps the hand-written encoder.
func BenchmarkLedgerStateAppendJSON(b *testing.B) {
	st := LedgerState{Key: "run:r0haltline-sat64-1014-2", Limit: Vector{Steps: 100}, FinalReserve: Vector{Steps: 1},
		Spent: Vector{Steps: 3, Tokens: 2754, InputTokens: 2700, OutputTokens: 54, Cost: 15_006_000_000}, Reserved: Vector{Steps: 1, Tokens: 1900}}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = st.AppendJSON(make([]byte, 0, len(st.Key)+320))
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&st)
		}
	})
}

func fullReservationState(ledgers []string, n int64, at time.Time) ReservationState {
	return ReservationState{ID: uint64(n) * 2654435761, Ledgers: ledgers,
		Want: Vector{Steps: n, Tokens: n + 1, InputTokens: n + 2, OutputTokens: n + 3, ToolCalls: n + 4, Cost: Money(n + 5)}, Expires: at}
}

// A hold's record is what json.Marshal writes: restores read it back with
// the store's decoder.
func TestReservationStateAppendJSONIsMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 1, 15, 8, 0, 1, 500, time.UTC)
	for name, st := range map[string]ReservationState{
		"zero":      {},
		"no ledger": {ID: 7, Ledgers: []string{}, Want: Vector{Steps: 1}, Expires: at},
		"call":      {ID: 1 << 63, Ledgers: []string{"run:r-1", "team:t1:daily"}, Want: Vector{Steps: 1, Tokens: 1900, Cost: 9_500_000_000}, Expires: at},
		"full":      fullReservationState([]string{"org:o"}, 86_400, at),
		"escapes":   fullReservationState([]string{"team:<é\u2028\xff\"\\>", ""}, -3, at.In(time.FixedZone("x", -3600))),
	} {
		got, want, err := encodings(&st)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	// Every field set, so that a field added and not written shows above.
	full := reflect.ValueOf(fullReservationState([]string{"k"}, 1, at))
	for i := range full.NumField() {
		if full.Field(i).IsZero() {
			t.Errorf("fullReservationState leaves %s zero", full.Type().Field(i).Name)
		}
	}
}

func FuzzReservationStateAppendJSON(f *testing.F) {
	f.Add("run:r-1", "team:<\u2028\xff\"", int64(3), int64(1_800_000_000_123))
	f.Add("", "", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, k1, k2 string, n, ns int64) {
		st := fullReservationState([]string{k1, k2}, n, time.Unix(0, ns%(1<<62)).UTC())
		if got, want, err := encodings(&st); err == nil && got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkReservationStateAppendJSON is a call's hold, as trackReservation
// writes it at every model call.
func BenchmarkReservationStateAppendJSON(b *testing.B) {
	st := ReservationState{ID: 1014, Ledgers: []string{"run:r0haltline-sat64-1014-2"}, Want: Vector{Steps: 1, Tokens: 1900},
		Expires: time.Date(2026, 12, 1, 18, 5, 3, 123456789, time.UTC)}
	b.ReportAllocs()
	for b.Loop() {
		_ = st.AppendJSON(make([]byte, 0, 160))
	}
}
