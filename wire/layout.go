package wire

// Layout remembers where the largest top-level values (the history, the
// tool definitions) lie in the body a Request was read from, so that the
// codec can edit that same body later (PrepareUpstream, WrapUp) stepping
// over them instead of reading a few hundred kilobytes again. It answers
// only for the very body it was noted on: a context rewrite hands the codec
// a new body, which is read in full. The zero Layout knows nothing.
type Layout struct {
	body *byte // the noted body, by identity: same memory, same length
	n    int
	big  [2]struct{ start, end int }
}

// Note records that body[start:end] is a top-level value. The two largest
// are kept.
func (l *Layout) Note(body []byte, start, end int) {
	if len(body) == 0 || start < 0 || end <= start || end > len(body) {
		return
	}
	if !l.of(body) {
		*l = Layout{body: &body[0], n: len(body)}
	}
	small := 0
	if l.big[1].end-l.big[1].start < l.big[0].end-l.big[0].start {
		small = 1
	}
	if end-start > l.big[small].end-l.big[small].start {
		l.big[small].start, l.big[small].end = start, end
	}
}

// End returns the end of the value starting at start in body when it was
// noted for this very body, else -1.
func (l *Layout) End(body []byte, start int) int {
	if l.of(body) {
		for _, v := range l.big {
			if v.start == start && v.end > start {
				return v.end
			}
		}
	}
	return -1
}

func (l *Layout) of(body []byte) bool {
	return l.body != nil && len(body) == l.n && &body[0] == l.body
}
