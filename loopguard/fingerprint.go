package loopguard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
)

// Fingerprint identifies a tool call (or a tool result) up to volatile
// detail. It has two parts:
//
//   - bytes 0–15: the identity, SHA-256 truncated to 128 bits. Equal
//     identities mean equal canonical calls. 128 bits keep collisions out of
//     reach (about 2^64 work even for a chosen-input attacker, which matters
//     because the gateway's idempotency gate returns a stored result for an
//     equal fingerprint) while halving what each run keeps in memory and in
//     its checkpoint compared with the full digest.
//   - bytes 16–23: the shape, 64 bits of SHA-256 over the same canonical form
//     with every run of digits masked. Calls that differ only in numbers
//     (offset 100, 101, 102…) share a shape; the stall detector uses it to
//     tell "the same question with a nudged number" from a different action.
//     Observation fingerprints leave it zero.
//
// Since the shape is a function of the identity, two fingerprints are equal
// exactly when their identities are.
type Fingerprint [24]byte

// String returns the first 8 bytes of the identity as hex, enough to tell
// fingerprints apart in records and logs.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:8]) }

// IsZero reports whether f is the zero value.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

func (f Fingerprint) shape() uint64 { return binary.LittleEndian.Uint64(f[16:]) }

// Domain prefixes keep call, shape and observation hashes apart even when
// their canonical bytes coincide.
const (
	domainCall  = "haltline/loopguard/call/v1\x00"
	domainShape = "haltline/loopguard/shape/v1\x00"
	domainObs   = "haltline/loopguard/obs/v1\x00"
)

// maxPooledBuffer keeps one huge tool result from pinning its buffer in the
// pool for the life of the process.
const maxPooledBuffer = 1 << 20

// Canonicalizer turns tool arguments and results into canonical bytes and
// fingerprints. It is safe for concurrent use; working memory comes from a
// pool, so steady-state calls do not allocate.
type Canonicalizer struct {
	volatile *keySet
	pool     sync.Pool
}

// NewCanonicalizer returns a Canonicalizer that drops object members whose
// key is in volatileKeys (case-insensitive) at any depth. A nil list means
// DefaultVolatileKeys; an empty non-nil list drops nothing.
func NewCanonicalizer(volatileKeys []string) *Canonicalizer {
	if volatileKeys == nil {
		volatileKeys = defaultVolatileKeys
	}
	c := &Canonicalizer{volatile: newKeySet(volatileKeys)}
	c.pool.New = func() any {
		return &scratch{buf: make([]byte, 0, 4096), shape: make([]byte, 0, 4096)}
	}
	return c
}

func (c *Canonicalizer) get() *scratch { return c.pool.Get().(*scratch) }

func (c *Canonicalizer) put(st *scratch) {
	if cap(st.buf) > maxPooledBuffer || cap(st.tmp) > maxPooledBuffer ||
		cap(st.str) > maxPooledBuffer || cap(st.shape) > maxPooledBuffer ||
		cap(st.alt) > maxPooledBuffer {
		return
	}
	c.pool.Put(st)
}

// Canonical appends the canonical form of args to dst and returns it. The
// result is always valid JSON: compact, object keys sorted, volatile members
// removed, numbers spelt one way per value (1.0, 1 and 1e0 give 1; -0 gives
// 0) and volatile values inside strings (timestamps, epochs, UUIDs, long hex
// and random ids) replaced by placeholders such as "<ts>". Input that is not
// JSON becomes a JSON string of its whitespace-folded, normalised text. It
// never fails and Canonical of its own output returns that output.
func (c *Canonicalizer) Canonical(dst, args []byte) []byte {
	st := c.get()
	dst = canonical(dst, args, st, c.volatile)
	c.put(st)
	return dst
}

// Fingerprint hashes the agent id, the tool name and the canonical form of
// the arguments.
func (c *Canonicalizer) Fingerprint(agentID, tool string, args []byte) Fingerprint {
	fp, _ := c.fingerprints(agentID, tool, args, false, nil)
	return fp
}

// Fingerprints is Fingerprint(agentID, tool, args) and Fingerprint("",
// tool, args) — a call as its agent made it, and as any agent would — from
// one canonical form of the arguments, which is most of a fingerprint's
// cost (the gateway needs both for each tool call a model asks for: the
// loop guard's, and the key a tool route finds the run by).
func (c *Canonicalizer) Fingerprints(agentID, tool string, args []byte) (agent, anyAgent Fingerprint) {
	return c.fingerprints(agentID, tool, args, true, nil)
}

// CallPrints is Fingerprints and Sketch from one canonical form of the
// arguments: all the loop guard and the tool routes need of a tool call.
func (c *Canonicalizer) CallPrints(agentID, tool string, args []byte) (agent, anyAgent Fingerprint, sk Sketch) {
	agent, anyAgent = c.fingerprints(agentID, tool, args, true, &sk)
	return agent, anyAgent, sk
}

// fingerprints is Fingerprints, or with both false only the agent's; with
// sk set, it sketches the arguments too.
func (c *Canonicalizer) fingerprints(agentID, tool string, args []byte, both bool, sk *Sketch) (agent, anyAgent Fingerprint) {
	st := c.get()
	b := appendCallHead(st.buf[:0], agentID, tool)
	head := len(b)
	b = canonical(b, args, st, c.volatile)
	st.buf = b
	agent = st.fingerprint(b, head)
	if sk != nil {
		*sk = sketchOf(agentID, tool, b[head:])
	}
	if agentID == "" || !both {
		c.put(st)
		return agent, agent
	}
	a := appendCallHead(st.alt[:0], "", tool)
	a = append(a, b[head:]...)
	st.alt = a
	anyAgent = st.fingerprint(a, len(a)-(len(b)-head))
	c.put(st)
	return agent, anyAgent
}

// appendCallHead appends what a call's hash input holds before the
// arguments: the domain, the agent id and the tool name.
func appendCallHead(b []byte, agentID, tool string) []byte {
	b = append(b, domainCall...)
	b = binary.AppendUvarint(b, uint64(len(agentID)))
	b = append(b, agentID...)
	b = binary.AppendUvarint(b, uint64(len(tool)))
	return append(b, tool...)
}

// fingerprint hashes b, a call's hash input whose canonical arguments
// start at head: its identity, then its shape (the ids and the arguments
// with every run of digits masked).
func (st *scratch) fingerprint(b []byte, head int) Fingerprint {
	var fp Fingerprint
	sum := sha256.Sum256(b)
	copy(fp[:16], sum[:16])

	sh := append(st.shape[:0], domainShape...)
	sh = append(sh, b[len(domainCall):head]...)
	sh = appendDigitsMasked(sh, b[head:])
	st.shape = sh
	sum = sha256.Sum256(sh)
	copy(fp[16:], sum[:8])
	return fp
}

// appendDigitsMasked appends s with every run of digits replaced by one
// '#', copying the bytes between runs in bulk: a byte at a time, this
// would be a large share of a fingerprint's time.
func appendDigitsMasked(dst, s []byte) []byte {
	for len(s) > 0 {
		i := 0
		for i < len(s) && !isDigit(s[i]) {
			i++
		}
		dst = append(dst, s[:i]...)
		if i == len(s) {
			break
		}
		dst = append(dst, '#')
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
		s = s[i:]
	}
	return dst
}

// Observation hashes a tool result normalised like arguments: canonical JSON
// when it is JSON, otherwise whitespace-folded text with volatile values
// replaced, so "no data", "[]" or the same error message hash the same on
// every step. The shape part is zero.
func (c *Canonicalizer) Observation(result []byte) Fingerprint {
	st := c.get()
	b := append(st.buf[:0], domainObs...)
	b = canonical(b, result, st, c.volatile)
	st.buf = b
	var fp Fingerprint
	sum := sha256.Sum256(b)
	copy(fp[:16], sum[:16])
	c.put(st)
	return fp
}
