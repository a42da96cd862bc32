package sse

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func split(t *testing.T, stream string, cuts []int) []string {
	t.Helper()
	var s Splitter
	var got []string
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		if c < prev || c > len(stream) {
			continue
		}
		s.Feed([]byte(stream[prev:c]), func(ev []byte) { got = append(got, string(ev)) })
		prev = c
	}
	if p := s.Pending(); len(p) > 0 {
		got = append(got, string(p))
	}
	return got
}

func TestSplitterCutsAnywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		stream string
		want   []string
	}{
		{"lf", "data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"data: a\r\n\r\n", "data: b\r\n\r\n"}},
		{"named", "event: x\ndata: {}\n\nevent: y\ndata: {}\n\n", []string{"event: x\ndata: {}\n\n", "event: y\ndata: {}\n\n"}},
		{"unterminated tail", "data: a\n\ndata: b", []string{"data: a\n\n", "data: b"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			for cut := 0; cut <= len(tc.stream); cut++ {
				for cut2 := cut; cut2 <= len(tc.stream); cut2++ {
					got := split(t, tc.stream, []int{cut, cut2})
					if strings.Join(got, "|") != strings.Join(tc.want, "|") {
						t.Fatalf("cuts %d,%d: got %q want %q", cut, cut2, got, tc.want)
					}
				}
			}
		})
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	name, data := Fields([]byte("event: message_start\ndata: {\"a\":1}\n\n"))
	if string(name) != "message_start" || string(data) != `{"a":1}` {
		t.Fatalf("got %q %q", name, data)
	}
	_, data = Fields([]byte(": comment\ndata: a\ndata: b\ndata: c\n\n"))
	if string(data) != "a\nb\nc" {
		t.Fatalf("joined %q", data)
	}
}

func FuzzSplitter(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\n\n"), uint16(3))
	f.Add([]byte("event: x\r\ndata: {}\r\n\r\n"), uint16(7))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		c := int(cut) % (len(stream) + 1)
		var whole, parts bytes.Buffer
		var s1, s2 Splitter
		s1.Feed(stream, func(ev []byte) { whole.Write(ev); Fields(ev) })
		whole.Write(s1.Pending())
		s2.Feed(stream[:c], func(ev []byte) { parts.Write(ev) })
		s2.Feed(stream[c:], func(ev []byte) { parts.Write(ev) })
		parts.Write(s2.Pending())
		if !bytes.Equal(whole.Bytes(), stream) || !bytes.Equal(parts.Bytes(), stream) {
			t.Fatalf("bytes lost or reordered")
		}
	})
}

func TestLastEventStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"data: a\n\ndata: [DONE]\n\n", 9},
		{"event: a\ndata: {}\n\nevent: b\ndata: {}\n\nevent: c\ndata: {}\n\n", 38},
		{"data: [DONE]\n\n", 0},               // one event: nothing before it
		{"data: a\n\ndata: [DO", 0},           // ends mid-event
		{"data: a\r\n\r\ndata: b\r\n\r\n", 0}, // not \n-framed: no cut
		{"", 0},
	} {
		if got := LastEventStart([]byte(tc.in)); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.in, got, tc.want)
		}
	}
}

// Cut at LastEventStart, a read gives the same events, and its last whole
// event completes in the second piece: the first never reads it.
func FuzzLastEventStart(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\n\n"))
	f.Add([]byte("x\r\r\n\ndata: b\n\n"))
	f.Add([]byte("event: x\ndata: {}\n\n\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := LastEventStart(stream)
		if c == 0 {
			return
		}
		if c < 0 || c >= len(stream) {
			t.Fatalf("cut %d outside 1..%d", c, len(stream)-1)
		}
		var whole, parts bytes.Buffer
		var s1, s2 Splitter
		s1.Feed(stream, func(ev []byte) { whole.WriteString(fmt.Sprintf("%q|", ev)) })
		s2.Feed(stream[:c], func(ev []byte) { parts.WriteString(fmt.Sprintf("%q|", ev)) })
		before := parts.Len()
		s2.Feed(stream[c:], func(ev []byte) { parts.WriteString(fmt.Sprintf("%q|", ev)) })
		if whole.String() != parts.String() {
			t.Fatalf("events differ: %s vs %s", whole.String(), parts.String())
		}
		if parts.Len() == before {
			t.Fatalf("the read's last whole event was completed by the first piece")
		}
	})
}

func BenchmarkSplitterPerChunk(b *testing.B) {
	ev := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" capital"},"finish_reason":null}],"usage":null}` + "\n\n")
	var s Splitter
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		s.Feed(ev, func([]byte) {})
	}
}

// eventEndByteLoop is eventEnd finding line ends a byte at a time, without
// lineEnd: the reference FuzzEventEnd holds it to. Fields finds line ends
// with lineEnd too, which the same target compares with bytes.IndexAny
// directly.
func eventEndByteLoop(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' && b[i] != '\r' {
			continue
		}
		end, next := blankAfter(b, i)
		if next < 0 {
			return end
		}
		i = next - 1
	}
	return -1
}

func TestEventEndLineEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"data: a\n\nrest", 9},
		{"data: a\r\n\r\nrest", 11},
		{"data: a\r\rrest", 9},
		{"data: a\r\n\rrest", 10},
		{"data: a\n\r\nrest", 10},
		{"data: a\r", -1}, // \r or \r\n: not yet known
		{"data: a\r\n\r", -1},
		{"data: a\ndata: b\n", -1},
		{"event: x\ndata: {}\n\n", 19},
		{"no line end", -1},
		{"", -1},
	} {
		if got := eventEnd([]byte(tc.in)); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.in, got, tc.want)
		}
	}
}

func FuzzEventEnd(f *testing.F) {
	for _, s := range []string{"data: a\n\n", "data: a\r\n\r\n", "x\r\ry", "a\r\n\r", "event: x\ndata: {}\n\n", ":c\r\ndata: b\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := eventEnd(b), eventEndByteLoop(b); got != want {
			t.Fatalf("eventEnd(%q) = %d, the byte loop says %d", b, got, want)
		}
		if got, want := lineEnd(b), bytes.IndexAny(b, "\r\n"); got != want {
			t.Fatalf("lineEnd(%q) = %d, IndexAny says %d", b, got, want)
		}
	})
}
