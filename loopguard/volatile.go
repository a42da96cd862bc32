package loopguard

import (
	"strings"
)

// defaultVolatileKeys are member names whose values differ on every call by
// design. Policy data may replace the list; matching is case-insensitive.
var defaultVolatileKeys = []string{
	"timestamp", "ts", "time", "date", "datetime", "now",
	"created_at", "createdAt", "updated_at", "updatedAt",
	"nonce", "salt", "cache_buster", "cachebuster", "_",
	"request_id", "requestId", "req_id", "trace_id", "traceId",
	"traceparent", "tracestate", "span_id", "spanId",
	"idempotency_key", "idempotencyKey", "correlation_id", "correlationId",
	"uuid", "guid", "message_id", "messageId", "event_id", "eventId",
}

// DefaultVolatileKeys returns a copy of the default volatile key list.
func DefaultVolatileKeys() []string { return append([]string(nil), defaultVolatileKeys...) }

// keySet is the volatile-key set with a cheap prefilter, since most keys of
// a call are not volatile: a bit for each key's length, first and last
// byte (lower case). The default keys cover almost every length and a dozen
// first bytes, so a filter of length and first byte alone sent most of a
// JSON tool result's keys ("message", "decline_code") to the map.
type keySet struct {
	m      map[string]struct{}
	filter [keyFilterBits / 64]uint64
}

// keyFilterBits is the prefilter's size: 34 default keys set about 3 % of
// its bits.
const (
	keyFilterLog  = 10
	keyFilterBits = 1 << keyFilterLog
)

// keyFilterBit is the prefilter's bit for a key k (non-empty, under 64
// bytes), as bytes of any case.
func keyFilterBit(k []byte) uint32 {
	h := uint32(len(k))<<16 | uint32(lower(k[0]))<<8 | uint32(lower(k[len(k)-1]))
	return (h * 0x9E3779B1) >> (32 - keyFilterLog)
}

func newKeySet(keys []string) *keySet {
	ks := &keySet{m: make(map[string]struct{}, len(keys))}
	for _, k := range keys {
		if k == "" || len(k) >= 64 {
			continue
		}
		k = strings.ToLower(k)
		ks.m[k] = struct{}{}
		b := keyFilterBit([]byte(k))
		ks.filter[b/64] |= 1 << (b % 64)
	}
	return ks
}

// mayHold reports whether key (any case) may be in the set: false is sure.
func (ks *keySet) mayHold(key []byte) bool {
	if len(key) == 0 || len(key) >= 64 {
		return false
	}
	b := keyFilterBit(key)
	return ks.filter[b/64]&(1<<(b%64)) != 0
}

// Placeholders contain no digits and no letters next to '<' or '>' that a
// second pass could read as a volatile value, which keeps normalisation
// idempotent.
const (
	phTime  = "<ts>"
	phEpoch = "<epoch>"
	phUUID  = "<uuid>"
	phHex   = "<hex>"
	phID    = "<id>"
)

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Byte classes for the hot loops.
const (
	clSafe   = iota // copied as is
	clEscape        // quote, backslash, control characters
	clLetter
	clDigit
)

var byteClass = func() (t [256]byte) {
	for c := 0; c < 256; c++ {
		switch {
		case c >= '0' && c <= '9':
			t[c] = clDigit
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t[c] = clLetter
		case c < 0x20 || c == '"' || c == '\\':
			t[c] = clEscape
		}
	}
	return t
}()

// appendNormalized writes s (valid UTF-8) as a JSON string with volatile
// values replaced by placeholders. Candidates are looked for only at the
// start of an alphanumeric token and only when the token has the right
// length and follower ("2024" then '-', "12" then ':'), so ordinary text is
// copied in bulk: what needs no change is copied once, up to the next
// escape or placeholder (a copy a token was most of a large tool result's
// hashing).
func appendNormalized(dst, s []byte) []byte {
	dst = append(dst, '"')
	return append(normalizeBytes(dst, s, 0, 0), '"')
}

// normalizeBytes is appendNormalized's loop a byte at a time, from s[i] (a
// token's start, or a byte outside tokens) with s[from:i] not yet written.
func normalizeBytes(dst, s []byte, from, i int) []byte {
	for i < len(s) {
		switch byteClass[s[i]] {
		case clSafe:
			i++
			for i < len(s) && byteClass[s[i]] == clSafe {
				i++
			}
			continue
		case clEscape:
			dst = appendEscaped(append(dst, s[from:i]...), s[i])
			i++
			from = i
			continue
		}
		j := i + 1
		for j < len(s) && byteClass[s[j]] >= clLetter {
			j++
		}
		// Only a token of 2, 4 or 8 bytes may start a multi-token match
		// (see matchAt), and one of 10 or more be a run to classify: most
		// are other lengths, and nothing is written for them.
		if run := j - i; run < 10 && (run&(run-1) != 0 || run&0b1110 == 0) {
			i = j
			continue
		}
		dst, from, i = normalizeToken(dst, s, from, i, j)
	}
	return append(dst, s[from:]...)
}

// normalizeToken writes the token of letters and digits s[i:j] as the
// byte loop reads it — a timestamp or a UUID that starts there as its
// placeholder, a token of 10 bytes or more as appendRun writes it, any
// other token left in s[from:] — and returns dst, from and the index after
// what it read.
func normalizeToken(dst, s []byte, from, i, j int) ([]byte, int, int) {
	if run := j - i; run&(run-1) == 0 && run&0b1110 != 0 {
		if n := matchAt(s[i:], run); n != 0 {
			dst = append(dst, s[from:i]...)
			if n > 0 {
				dst, i = append(dst, phTime...), i+n
			} else {
				dst, i = append(dst, phUUID...), i-n
			}
			return dst, i, i
		}
	}
	if j-i >= 10 {
		return appendRun(append(dst, s[from:i]...), s[i:j]), j, j
	}
	return dst, from, j
}

// matchAt tries the patterns that span several tokens at the start of s,
// whose first alphanumeric token is run bytes long. It returns the length of
// a timestamp, minus the length of a UUID, or 0.
func matchAt(s []byte, run int) int {
	if run >= len(s) {
		return 0
	}
	switch next := s[run]; {
	case run == 8 && next == '-':
		return -matchUUID(s)
	case run == 4 && (next == '-' || next == '/'):
		return matchDateTime(s)
	case run == 2 && next == ':':
		return matchClock(s)
	}
	return 0
}

// endsToken reports whether a match of n bytes ends at a token boundary. The
// characters that could continue a timestamp, and '<' (the start of a
// placeholder written by an earlier pass), are not boundaries: otherwise a
// second pass could match where the first did not. A '.' is a boundary
// because a fraction is consumed greedily whenever a digit follows it.
func endsToken(s []byte, n int) bool {
	if n >= len(s) {
		return true
	}
	c := s[n]
	return !isAlnum(c) && c != '<' && c != ':' && c != '+' && c != '-' && c != '/'
}

func matchUUID(s []byte) int {
	if len(s) < 36 {
		return 0
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return 0
			}
		default:
			if !isHex(s[i]) {
				return 0
			}
		}
	}
	// A UUID has no optional parts, so only '<' needs the care of endsToken.
	if len(s) > 36 && (isAlnum(s[36]) || s[36] == '<') {
		return 0
	}
	return 36
}

// num reads exactly n digits at s[i:] and returns their value, or -1.
func num(s []byte, i, n int) int {
	if i+n > len(s) {
		return -1
	}
	v := 0
	for _, c := range s[i : i+n] {
		if !isDigit(c) {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

func validDate(y, mo, d int) bool { return y >= 1900 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 }
func validTime(h, mi, sec int) bool {
	return h >= 0 && h <= 24 && mi >= 0 && mi <= 59 && sec >= 0 && sec <= 60
}

// matchDateTime matches a date with a time of day: RFC 3339 and its common
// relatives ("2024-05-01T12:00:00.5Z", "2024-05-01 12:00", "2024/05/01
// 12:00:00+02:00"). A date alone is not volatile: a report for a given day
// is a different query from one for the next day.
func matchDateTime(s []byte) int {
	y := num(s, 0, 4)
	if y < 0 || len(s) < 16 || (s[4] != '-' && s[4] != '/') || s[7] != s[4] {
		return 0
	}
	mo, d := num(s, 5, 2), num(s, 8, 2)
	if !validDate(y, mo, d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') {
		return 0
	}
	n := matchTimeOfDay(s[11:], false)
	if n == 0 {
		return 0
	}
	i := 11 + n
	// Time zone.
	if i < len(s) && (s[i] == 'Z' || s[i] == 'z') {
		i++
	} else if i < len(s) && (s[i] == '+' || s[i] == '-') && num(s, i+1, 2) >= 0 {
		i += 3
		if i < len(s) && s[i] == ':' && num(s, i+1, 2) >= 0 {
			i += 3
		} else if num(s, i, 2) >= 0 {
			i += 2
		}
	}
	if !endsToken(s, i) {
		return 0
	}
	return i
}

// matchTimeOfDay matches HH:MM[:SS[.frac]]; seconds are required when
// needSeconds is set.
func matchTimeOfDay(s []byte, needSeconds bool) int {
	h, mi := num(s, 0, 2), num(s, 3, 2)
	if h < 0 || mi < 0 || s[2] != ':' {
		return 0
	}
	sec, i := 0, 5
	if i < len(s) && s[i] == ':' {
		if sec = num(s, i+1, 2); sec < 0 {
			return 0
		}
		i += 3
		if i+1 < len(s) && (s[i] == '.' || s[i] == ',') && isDigit(s[i+1]) {
			i++
			for i < len(s) && isDigit(s[i]) {
				i++
			}
		}
	} else if needSeconds {
		return 0
	}
	if !validTime(h, mi, sec) {
		return 0
	}
	return i
}

// matchClock matches a bare time of day with seconds ("12:00:01"), the usual
// prefix of a log line.
func matchClock(s []byte) int {
	if len(s) < 8 {
		return 0
	}
	n := matchTimeOfDay(s, true)
	if n == 0 || !endsToken(s, n) {
		return 0
	}
	return n
}

// appendRun writes one maximal alphanumeric run, replacing it when it looks
// like an epoch, a compact timestamp, a long hex id or a random base64-ish
// id. A run that is none of these may still end in an epoch ("errors1714…").
func appendRun(dst, run []byte) []byte {
	if ph := classifyRun(run); ph != "" {
		return append(dst, ph...)
	}
	k := len(run)
	for k > 0 && isDigit(run[k-1]) {
		k--
	}
	if k > 0 && k < len(run) {
		if ph := classifyDigits(run[k:]); ph != "" {
			// The prefix is classified on its own, as a second pass would
			// see it once the suffix has become a placeholder.
			return append(appendRun(dst, run[:k]), ph...)
		}
	}
	return append(dst, run...)
}

func classifyDigits(d []byte) string {
	switch len(d) {
	case 10, 13, 16, 19: // epoch s, ms, µs, ns between 2001 and 2033
		if d[0] == '1' {
			return phEpoch
		}
	case 14: // 20240501120000
		if validDate(num(d, 0, 4), num(d, 4, 2), num(d, 6, 2)) &&
			validTime(num(d, 8, 2), num(d, 10, 2), num(d, 12, 2)) {
			return phTime
		}
	}
	return ""
}

func classifyRun(run []byte) string {
	n := len(run)
	var upper, lower, digits, hexLetters, trans int
	prev := byte(0)
	for _, c := range run {
		var cl byte
		switch {
		case c >= '0' && c <= '9':
			digits++
			cl = 1
		case c >= 'a' && c <= 'z':
			lower++
			if c <= 'f' {
				hexLetters++
			}
			cl = 2
		default:
			upper++
			if c <= 'F' {
				hexLetters++
			}
			cl = 3
		}
		if prev != 0 && cl != prev {
			trans++
		}
		prev = cl
	}
	switch {
	case digits == n:
		return classifyDigits(run)
	case (n == 15 || n == 16) && (run[8] == 'T' || run[8] == 't') &&
		(n == 15 || run[15] == 'Z' || run[15] == 'z'):
		// 20240501T120000Z
		if num(run, 0, 8) >= 0 && num(run, 9, 6) >= 0 &&
			validDate(num(run, 0, 4), num(run, 4, 2), num(run, 6, 2)) &&
			validTime(num(run, 9, 2), num(run, 11, 2), num(run, 13, 2)) {
			return phTime
		}
	}
	if n >= 16 && digits+hexLetters == n && digits > 0 && hexLetters > 0 {
		return phHex
	}
	// Random ids mix classes almost every character; camelCase names and
	// words switch class far less often.
	if n >= 20 && upper > 0 && lower > 0 && digits > 0 && 2*trans >= n {
		return phID
	}
	return ""
}
