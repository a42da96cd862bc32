// Package sse splits a Server-Sent Events byte stream, cut at arbitrary
// points, into whole events without copying when an event lies inside one
// chunk. It owns SSE framing only (WHATWG HTML §9.2): no provider semantics,
// no transport.
package sse

import "bytes"

// MaxEvent bounds one held event; a longer one is passed on as it is (the
// provider said something we cannot read, and the client must still get it).
const MaxEvent = 4 << 20

// Splitter cuts a stream into events. The zero value is ready to use.
type Splitter struct {
	held []byte // the start of an event whose end has not arrived yet
}

// Feed calls fn for each complete event in held+chunk, in order. The event
// slice includes its terminating blank line and is valid only during fn.
// Bytes after the last complete event are held for the next call.
func (s *Splitter) Feed(chunk []byte, fn func(event []byte)) {
	if len(s.held) > 0 {
		// Join only as much as completes the held event, then go on in chunk.
		start := len(s.held)
		s.held = append(s.held, chunk...)
		// An event end may straddle the boundary: search from a little before it.
		from := max(start-3, 0)
		end := eventEnd(s.held[from:])
		if end < 0 {
			if len(s.held) > MaxEvent {
				fn(s.held)
				s.held = s.held[:0]
			}
			return
		}
		end += from
		fn(s.held[:end])
		consumed := end - start // bytes of chunk used by the held event
		s.held = s.held[:0]
		chunk = chunk[consumed:]
	}
	for len(chunk) > 0 {
		end := eventEnd(chunk)
		if end < 0 {
			if len(chunk) > MaxEvent {
				fn(chunk)
				return
			}
			s.held = append(s.held, chunk...)
			return
		}
		fn(chunk[:end])
		chunk = chunk[end:]
	}
}

// Pending returns the bytes held back (an unterminated last event).
func (s *Splitter) Pending() []byte { return s.held }

// Reset drops what is held.
func (s *Splitter) Reset() { s.held = s.held[:0] }

// FirstEventEnd returns the index just past the first whole event of b
// (b read from an event's start), or -1.
func FirstEventEnd(b []byte) int { return eventEnd(b) }

// LastEventStart returns where the last event of b begins when b ends with
// a whole event, \n-framed, after at least one other event's end; else 0.
// Bytes before it end events (or an event held from earlier), so b can be
// fed in two pieces at that point with the same events read. The front end
// cuts a read there to relay what precedes a stream's terminal event before
// it settles the call. Line ends other than \n give 0: no cut, never a
// wrong one.
func LastEventStart(b []byte) int {
	n := len(b)
	if n < 4 || b[n-1] != '\n' || b[n-2] != '\n' {
		return 0
	}
	if i := bytes.LastIndex(b[:n-2], []byte("\n\n")); i >= 0 {
		return i + 2
	}
	return 0
}

// LastEventEnd returns the index just past the blank line that ends the
// last whole event of b (b read from an event's start, or from inside an
// event whose head came before), or 0 when b ends none. Bytes after it are
// the head of an event still to come.
func LastEventEnd(b []byte) int {
	n := len(b)
	if n >= 2 && b[n-1] == '\n' && (b[n-2] == '\n' || (n >= 4 && b[n-2] == '\r' && b[n-3] == '\n' && b[n-4] == '\r')) {
		return n // the common case: b ends with its event
	}
	end := 0
	if i := bytes.LastIndex(b, []byte("\n\n")); i >= 0 {
		end = i + 2
	}
	if i := bytes.LastIndex(b, []byte("\r\n\r\n")); i >= 0 && i+4 > end {
		end = i + 4
	}
	// A lone \r ends a line too: \r\r, or \r\r\n when a \n follows.
	if i := bytes.LastIndex(b, []byte("\r\r")); i >= 0 && i+2 < n && i+2 > end {
		end = i + 2
		if b[i+2] == '\n' {
			end++
		}
	}
	return end
}

// eventEnd returns the index just past the blank line ending the first event
// in b, or -1. Line ends may be \n, \r\n or \r.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); {
		k := lineEnd(b[i:])
		if k < 0 {
			return -1
		}
		end, next := blankAfter(b, i+k)
		if next < 0 {
			return end
		}
		i = next
	}
	return -1
}

// blankAfter reads what follows the line end at b[i]: a blank line, whose
// end ends the event (end, -1); the start of the next line (-1, next); or
// too few bytes to tell (-1, -1).
func blankAfter(b []byte, i int) (end, next int) {
	// The line end's length is 1, or 2 for \r\n.
	n := 1
	if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
		n = 2
	} else if b[i] == '\r' && i+1 == len(b) {
		return -1, -1 // cannot tell \r from \r\n yet
	}
	j := i + n
	if j >= len(b) {
		return -1, -1
	}
	if b[j] == '\n' {
		return j + 1, -1
	}
	if b[j] == '\r' {
		if j+1 < len(b) && b[j+1] == '\n' {
			return j + 2, -1
		}
		if j+1 == len(b) {
			return -1, -1
		}
		return j + 1, -1
	}
	return -1, j
}

// lineEnd returns the index of the first \r or \n in b, or -1: two
// vectorized scans (bytes.IndexByte), the second only over the line, where
// a loop over bytes or bytes.IndexAny takes a byte at a time (a chat
// chunk's tap spent a third of its time finding line ends).
func lineEnd(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	line := b
	if n >= 0 {
		line = b[:n]
	}
	if r := bytes.IndexByte(line, '\r'); r >= 0 {
		return r
	}
	return n
}

// Fields returns the event name and the data of one event. With several data
// lines the data is joined with \n into a new slice; with one it aliases event.
func Fields(event []byte) (name, data []byte) {
	var joined []byte
	count := 0
	for len(event) > 0 {
		var line []byte
		i := lineEnd(event)
		if i < 0 {
			line, event = event, nil
		} else {
			line = event[:i]
			if event[i] == '\r' && i+1 < len(event) && event[i+1] == '\n' {
				i++
			}
			event = event[i+1:]
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			field, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			name = value
		case "data":
			count++
			switch count {
			case 1:
				data = value
			case 2:
				joined = append(append(append(joined, data...), '\n'), value...)
				data = joined
			default:
				joined = append(append(joined, '\n'), value...)
				data = joined
			}
		}
	}
	return name, data
}
