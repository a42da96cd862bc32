package loopguard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// referenceFingerprint is Fingerprint as its comment defines it, computed
// the long way: a test's independent account of the bytes hashed.
func referenceFingerprint(c *Canonicalizer, agentID, tool string, args []byte) Fingerprint {
	var ids []byte
	ids = binary.AppendUvarint(ids, uint64(len(agentID)))
	ids = append(ids, agentID...)
	ids = binary.AppendUvarint(ids, uint64(len(tool)))
	ids = append(ids, tool...)
	canon := c.Canonical(nil, args)
	var fp Fingerprint
	id := sha256.Sum256(append(append([]byte(domainCall), ids...), canon...))
	copy(fp[:16], id[:16])
	shape := append([]byte(domainShape), ids...)
	digits := false
	for _, ch := range canon {
		if isDigit(ch) {
			if !digits {
				shape = append(shape, '#')
			}
			digits = true
			continue
		}
		digits = false
		shape = append(shape, ch)
	}
	sh := sha256.Sum256(shape)
	copy(fp[16:], sh[:8])
	return fp
}

// Fingerprints gives what two Fingerprint calls give, and the values are
// those the gateway stored before it (stored fingerprints find stored tool
// results and lineage keys after an upgrade).
func TestFingerprints(t *testing.T) {
	t.Parallel()
	c := NewCanonicalizer(nil)
	tests := []struct {
		agent, tool, args string
		golden            string // Fingerprint(agent, tool, args), hex, as stores hold it
	}{
		{"agent-1", "query_logs", `{"b":2,"a":"x 2024-05-01T12:00:00Z","n":[1,2.0]}`, "9c04aa9c442f135ea12f29732cdb5f81183718b776271db2"},
		{"", "query_logs", `{"b":2,"a":"x 2024-05-01T12:00:00Z","n":[1,2.0]}`, "378e57bf4959e14668643d3840965389d5dbd6c1bfbe67f4"},
		{"ag", "t", "not json 42", "48a394fe8b38b9e791862924605e6e5175a533044acf3b62"},
		{"a-much-longer-agent-id-than-the-tool-name", "x", `{"page":7}`, ""},
		{"agent", "", ``, ""},
		{"agent", "t", `12345`, ""}, // digits from the first byte: where the arguments start matters to the shape
	}
	for _, tc := range tests {
		agent, anyAgent := c.Fingerprints(tc.agent, tc.tool, []byte(tc.args))
		if want := referenceFingerprint(c, tc.agent, tc.tool, []byte(tc.args)); agent != want {
			t.Errorf("Fingerprints(%q, %q, %q) agent's = %x, want %x", tc.agent, tc.tool, tc.args, agent, want)
		}
		if want := referenceFingerprint(c, "", tc.tool, []byte(tc.args)); anyAgent != want {
			t.Errorf("Fingerprints(%q, %q, %q) any agent's = %x, want %x", tc.agent, tc.tool, tc.args, anyAgent, want)
		}
		if got := c.Fingerprint(tc.agent, tc.tool, []byte(tc.args)); got != agent {
			t.Errorf("Fingerprint(%q, %q, %q) = %x, Fingerprints gave %x", tc.agent, tc.tool, tc.args, got, agent)
		}
		if tc.golden != "" && hex.EncodeToString(agent[:]) != tc.golden {
			t.Errorf("Fingerprint(%q, %q, %q) = %x, earlier versions wrote %s", tc.agent, tc.tool, tc.args, agent, tc.golden)
		}
	}
}

func FuzzFingerprints(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add("agent-1", "query_logs", []byte(s))
	}
	f.Add("", "t", []byte(`{"page":1}`))
	c := NewCanonicalizer(nil)
	f.Fuzz(func(t *testing.T, agentID, tool string, args []byte) {
		agent, anyAgent := c.Fingerprints(agentID, tool, args)
		if want := referenceFingerprint(c, agentID, tool, args); agent != want {
			t.Fatalf("agent's fingerprint %x, want %x", agent, want)
		}
		if want := referenceFingerprint(c, "", tool, args); anyAgent != want {
			t.Fatalf("any agent's fingerprint %x, want %x", anyAgent, want)
		}
	})
}

// BenchmarkFingerprints1KB is the two fingerprints of a tool call a model
// asks for (its agent's and any agent's): one canonical form, two hashes.
func BenchmarkFingerprints1KB(b *testing.B) {
	c := NewCanonicalizer(nil)
	args := args1KB(1)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		c.Fingerprints("agent-1", "query_logs", args)
	}
}

// The volatile-key prefilter never turns a listed key away, in any case;
// the keys of a typical tool result mostly never reach the map.
func TestVolatileKeyFilter(t *testing.T) {
	t.Parallel()
	keys := append(DefaultVolatileKeys(), "X-Request-Token", "a", "k_63_bytes_long_key_that_is_just_under_the_limit_of_the_filter")
	ks := newKeySet(keys)
	for _, k := range keys {
		for _, v := range []string{k, strings.ToUpper(k), strings.ToLower(k)} {
			if !ks.mayHold([]byte(v)) {
				t.Errorf("mayHold(%q) = false for a listed key", v)
			}
		}
	}
	passed := 0
	common := []string{"message", "host", "decline_code", "latency_ms", "id", "name", "path", "query", "limit", "offset", "status", "level", "service", "content", "title", "url", "body", "items", "results", "total"}
	for _, k := range common {
		if ks.mayHold([]byte(k)) {
			passed++
		}
	}
	if passed > 3 {
		t.Errorf("%d of %d common keys pass the prefilter", passed, len(common))
	}
}
