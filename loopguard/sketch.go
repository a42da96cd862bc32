package loopguard

// SketchBuckets is the number of one-permutation MinHash buckets of a
// Sketch: the estimate of a Jaccard similarity J has a standard error of
// about sqrt(J(1−J)/32), under 0.09.
const SketchBuckets = 32

// Sketch is a MinHash signature of the words of a call's arguments, for the
// semantic detector: two calls of one agent's tool whose word sets overlap
// enough are the same question asked again, even when no fingerprint is
// equal ("order status acme" and "acme order status"). The zero Sketch has
// no words and is never similar to anything.
//
// Words are taken from the canonical form (volatile members and values are
// gone already): string values and numbers, not object keys (a tool's calls
// all share them); lowercased, split on everything but letters and digits,
// without one-letter words, placeholders and a short list of English stop
// words; words of letters only cut to their first five, which folds the
// commonest inflections ("rotate", "rotation"). The set is those words and
// each pair of neighbours within one string. One-permutation hashing keeps
// the smallest hash per bucket, so a sketch costs one hash per word.
type Sketch struct {
	key  uint64 // agent and tool, never 0 for a sketch with words
	mins [SketchBuckets]uint32
}

// IsZero reports whether s holds no words.
func (s *Sketch) IsZero() bool { return s.key == 0 }

// Similar reports whether the estimated Jaccard similarity of the word sets
// of a and b is at least min: matching buckets over buckets filled in
// either. Sketches of different agents or tools are never similar.
func (a *Sketch) Similar(b *Sketch, min float64) bool {
	if a.key == 0 || a.key != b.key {
		return false
	}
	match, used := 0, 0
	for i := range a.mins {
		x, y := a.mins[i], b.mins[i]
		if x|y == 0 {
			continue
		}
		used++
		if x == y {
			match++
		}
	}
	return used > 0 && float64(match) >= min*float64(used)
}

// Sketch returns the sketch of a call's arguments.
func (c *Canonicalizer) Sketch(agentID, tool string, args []byte) Sketch {
	st := c.get()
	b := canonical(st.buf[:0], args, st, c.volatile)
	st.buf = b
	sk := sketchOf(agentID, tool, b)
	c.put(st)
	return sk
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
	// stemLen is where words of letters are cut.
	stemLen = 5
)

// mix64 is the splitmix64 finaliser: FNV's low bits, which pick the bucket,
// are weak on short inputs.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

type sketcher struct {
	sk    Sketch
	words int
	prev  uint64 // the previous word of the same string, 0 at its start
}

func (k *sketcher) add(h uint64) {
	h = mix64(h)
	v := uint32(h>>32) | 1 // 0 marks an empty bucket
	if m := &k.sk.mins[h%SketchBuckets]; *m == 0 || v < *m {
		*m = v
	}
}

// word adds one word (already lowercased) and the pair it forms with the
// previous word.
func (k *sketcher) word(w []byte) {
	if len(w) < 2 || stopWord(w) {
		return
	}
	letters := true
	for _, c := range w {
		if c < 'a' || c > 'z' {
			letters = false
			break
		}
	}
	if letters && len(w) > stemLen {
		w = w[:stemLen]
	}
	h := uint64(fnvOffset)
	for _, c := range w {
		h = (h ^ uint64(c)) * fnvPrime
	}
	k.add(h)
	if k.prev != 0 {
		k.add(k.prev*0x9E3779B97F4A7C15 ^ h)
	}
	k.prev = h
	k.words++
}

// text adds the words of one string's contents (JSON-escaped).
func (k *sketcher) text(s []byte) {
	k.prev = 0
	var buf [64]byte // a longer word is cut: it is still one word
	n := 0
	var before byte // the byte before the current word
	flush := func(next byte) {
		if n == 0 {
			return
		}
		// A placeholder such as "<ts>" is what the canonicaliser left
		// of a volatile value: not a word of the question.
		if before != '<' || next != '>' {
			k.word(buf[:min(n, len(buf))])
		}
		n = 0
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
			fallthrough
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c >= 0x80:
			if n == 0 {
				before = 0
				if i > 0 {
					before = s[i-1]
				}
			}
			if n < len(buf) {
				buf[n] = c
			}
			n++
		case c == '\\' && i+1 < len(s):
			flush(c)
			i++
			if s[i] == 'u' {
				i += 4 // \uXXXX: the code unit is not a word
			}
		default:
			flush(c)
		}
	}
	flush(0)
}

// sketchOf sketches canonical JSON (Canonical's output): string values
// and numbers, not keys.
func sketchOf(agentID, tool string, b []byte) Sketch {
	var k sketcher
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j, len(b))
			if !(end+1 < len(b) && b[end+1] == ':') {
				k.text(b[i+1 : end])
			}
			i = end + 1
		case c == '-' || isDigit(c):
			j := i + 1
			for j < len(b) && (isDigit(b[j]) || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
				j++
			}
			k.prev = 0
			k.word(b[i:j])
			i = j
		default:
			i++
		}
	}
	if k.words == 0 {
		return Sketch{}
	}
	h := uint64(fnvOffset)
	for i := 0; i < len(agentID); i++ {
		h = (h ^ uint64(agentID[i])) * fnvPrime
	}
	h = (h ^ 0xff) * fnvPrime // keeps ("ab","c") and ("a","bc") apart
	for i := 0; i < len(tool); i++ {
		h = (h ^ uint64(tool[i])) * fnvPrime
	}
	k.sk.key = h | 1
	return k.sk
}

// stopWord reports the English words that carry no question of their own.
func stopWord(w []byte) bool {
	switch string(w) {
	case "an", "the", "of", "for", "to", "in", "on", "at", "by", "with",
		"and", "or", "is", "are", "was", "be", "it", "its", "this", "that",
		"what", "which", "how", "me", "my", "from", "about", "as", "into",
		"please", "all", "any", "do", "does", "can", "you", "we", "our":
		return true
	}
	return false
}
