package wire

import (
	"bytes"
	"testing"
)

func TestLayout(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":[1,2,3],"b":"xy","c":[4]}`)
	var l Layout
	l.Note(body, 5, 12)  // [1,2,3]
	l.Note(body, 17, 21) // "xy"
	l.Note(body, 26, 29) // [4]: smaller than both, not kept
	if got := l.End(body, 5); got != 12 {
		t.Errorf("End(5) = %d", got)
	}
	if got := l.End(body, 17); got != 21 {
		t.Errorf("End(17) = %d", got)
	}
	if got := l.End(body, 26); got != -1 {
		t.Errorf("End(26) = %d, want -1 (not kept)", got)
	}
	// A copy, even byte for byte, is another body: a rewrite the codec
	// must read in full.
	if got := l.End(bytes.Clone(body), 5); got != -1 {
		t.Errorf("End on a copy = %d", got)
	}
	if got := l.End(body[:len(body)-1], 5); got != -1 {
		t.Errorf("End on a shorter slice = %d", got)
	}
	var zero Layout
	if got := zero.End(body, 5); got != -1 {
		t.Errorf("zero layout End = %d", got)
	}
}
