package loopguard

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

var canonicalSeeds = []string{
	`{"b":1,"a":[1.0,-0,1e2,"x"]}`,
	`{"query":"since 2024-05-01T12:00:00Z","nonce":"abc","page":{"n":2,"cursor":"eyJvZmZzZXQiOjIwfQ9Xk2L"}}`,
	`[{"id":"123e4567-e89b-12d3-a456-426614174000"},"run_1714567890123",20240501120000]`,
	`"\ud83d\ude00 \u0000 \\ \" 12:00:01"`,
	"not json at all\n\t 2024-05-01 12:00:00",
	`{"a":`, `[1,2`, `1e999999999999999999999`, `-0.000000e-5`, "",
	"2024-05-01T12:00:00Z1714567890", "x1714567890a1b2c3d4e5f6a7b8c9d0", "12:00:1714567890",
}

func FuzzCanonical(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s), uint64(1))
	}
	c := NewCanonicalizer(nil)
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		once := c.Canonical(nil, in)
		if !json.Valid(once) {
			t.Fatalf("output is not JSON: %q -> %q", in, once)
		}
		if twice := c.Canonical(nil, once); !bytes.Equal(once, twice) {
			t.Fatalf("not idempotent:\n in    %q\n once  %q\n twice %q", in, once, twice)
		}
		// Semantically equal JSON, re-encoded with shuffled keys, other
		// spacing and other number spellings, canonicalises the same.
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil || dec.More() || !json.Valid(in) || hasDuplicateKeys(in) {
			return
		}
		r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
		var alt bytes.Buffer
		if !reencode(&alt, v, r, 0) {
			return
		}
		if got := c.Canonical(nil, alt.Bytes()); !bytes.Equal(got, once) {
			t.Fatalf("semantically equal inputs differ:\n a %q -> %q\n b %q -> %q", in, once, alt.Bytes(), got)
		}
	})
}

// hasDuplicateKeys reports whether some object in valid JSON repeats a key,
// which a decoded map cannot represent.
func hasDuplicateKeys(in []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(in))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.key
		if top != nil && top.object {
			top.key = !top.key
		}
		switch d := tok.(type) {
		case json.Delim:
			switch d {
			case '{':
				stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
			}
		case string:
			if isKey {
				if top.keys[d] {
					return true
				}
				top.keys[d] = true
			}
		}
	}
}

// reencode writes v as JSON with keys in random order, random spacing and
// numbers respelt without changing their value. It gives up on duplicate
// keys, which encoding/json cannot represent.
func reencode(w *bytes.Buffer, v any, r *rand.Rand, depth int) bool {
	ws := func() {
		w.WriteString([]string{"", " ", "\n", "\t ", "  "}[r.IntN(5)])
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.WriteByte(',')
			}
			ws()
			kb, _ := json.Marshal(k)
			w.Write(kb)
			ws()
			w.WriteByte(':')
			ws()
			if !reencode(w, x[k], r, depth+1) {
				return false
			}
		}
		ws()
		w.WriteByte('}')
	case []any:
		w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				w.WriteByte(',')
			}
			ws()
			if !reencode(w, e, r, depth+1) {
				return false
			}
		}
		ws()
		w.WriteByte(']')
	case json.Number:
		s := string(x)
		mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
		switch r.IntN(3) {
		case 0:
			if !strings.Contains(mant, ".") {
				mant += ".0"
			} else {
				mant += "0"
			}
		case 1:
			if !hasExp {
				exp, hasExp = "0", true
			}
		}
		w.WriteString(mant)
		if hasExp {
			w.WriteString("E" + exp)
		}
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return false
		}
		w.Write(b)
	}
	return true
}

func FuzzGuard(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(bytes.Repeat([]byte{0x10, 0x81, 0x22}, 40))
	f.Fuzz(func(t *testing.T, ops []byte) {
		th := DefaultThresholds()
		if len(ops) > 0 && ops[0]&1 == 1 {
			th = LongTaskThresholds()
		}
		g := NewGuard(th)
		fp := func(b byte) Fingerprint {
			var f Fingerprint
			f[0], f[16] = b&7, b&3
			return f
		}
		// A few word sets, so that some calls are near-duplicates.
		c := NewCanonicalizer(nil)
		sketches := []Sketch{
			c.Sketch("a", "t", []byte(`"acme corp q3 revenue"`)),
			c.Sketch("a", "t", []byte(`"q3 revenue acme corp"`)),
			c.Sketch("a", "t", []byte(`"vault lease renew"`)),
			{},
		}
		var ids []string
		for i, op := range ops {
			switch op >> 6 {
			case 0, 1: // a step with 1..4 calls
				calls := make([]Call, 1+int(op>>4&3))
				for j := range calls {
					calls[j] = Call{ID: string(rune('a' + (i+j)%26)), Tool: "t", FP: fp(op + byte(j)), Sketch: sketches[(int(op)+j)%len(sketches)]}
					ids = append(ids, calls[j].ID)
				}
				g.Step(i, calls)
			case 2: // a result for some earlier call (or an unknown one)
				id := "unknown"
				if len(ids) > 0 {
					id = ids[int(op)%len(ids)]
				}
				g.Observe(id, fp(op>>3))
			case 3: // a restart
				state, err := g.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if len(state) > 64+len(g.ring)*(48+MaxCallsPerStep*(33+8+4*SketchBuckets))+MaxSeenObservations*16 {
					t.Fatalf("state of %d bytes exceeds its bound", len(state))
				}
				g = NewGuard(th)
				if err := g.UnmarshalBinary(state); err != nil {
					t.Fatal(err)
				}
			}
			if g.n > len(g.ring) || g.seen.len() > MaxSeenObservations {
				t.Fatalf("unbounded state: %d steps, %d observations", g.n, g.seen.len())
			}
		}
	})
}

func FuzzUnmarshal(f *testing.F) {
	g := NewGuard(DefaultThresholds())
	g.Step(1, []Call{{ID: "a", FP: Fingerprint{1}}})
	g.Observe("a", Fingerprint{2})
	state, _ := g.MarshalBinary()
	f.Add(state)
	f.Add([]byte("LGv1"))
	f.Add([]byte("LGv2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := NewGuard(DefaultThresholds())
		if err := g.UnmarshalBinary(data); err != nil {
			return
		}
		// A state that loads must keep working.
		g.Step(99, []Call{{ID: "x", FP: Fingerprint{3}}})
		g.Observe("x", Fingerprint{4})
		if _, err := g.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	})
}
