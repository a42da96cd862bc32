package contextmgr

import (
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Turn is the neutral view of a dropped turn handed to a Summarise
// callback.
type Turn struct {
	// Index is the position of the turn's first item in the agent's history.
	Index int `json:"index"`
	// Role is "user" or "assistant" (a turn of the model with its tool
	// results).
	Role string `json:"role"`
	// Text is what the model wrote in the turn.
	Text string `json:"text,omitempty"`
	// UserText is what the user wrote in the turn: a user message, or text
	// sent along with tool results.
	UserText string       `json:"user_text,omitempty"`
	Calls    []TurnCall   `json:"calls,omitempty"`
	Results  []TurnResult `json:"results,omitempty"`
}

// TurnCall is a tool call of a dropped turn.
type TurnCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// TurnResult is a tool result of a dropped turn, as the agent sent it.
type TurnResult struct {
	CallID string `json:"call_id"`
	Text   string `json:"text"`
}

// Bounds of the extractive summary and of the pinned facts: the system
// segment must stay small next to the watermark it serves.
const (
	summaryLineMax = 200  // one sentence of a dropped turn
	newSummaryMax  = 1500 // what one compression adds
	summaryMax     = 4000 // the whole summary; older lines go first
	factMax        = 300  // one pinned fact
	factsMax       = 32   // pinned facts per run
)

// neutralTurns returns the dropped turns ts. With view, result texts are
// views of the request (see conv.viewOf), for readers that copy what they
// keep.
func neutralTurns(c *conv, ts []turn, view bool) []Turn {
	var out []Turn
	for _, t := range ts {
		if t.sticky {
			continue
		}
		nt := Turn{Index: t.start, Role: "assistant"}
		if c.items[t.start].kind == kindUser {
			nt.Role = "user"
		}
		var text, user []string
		for j := t.start; j < t.end; j++ {
			it := &c.items[j]
			switch {
			case it.text == "":
			case it.role == "user":
				user = append(user, it.text)
			default:
				text = append(text, it.text)
			}
			for _, cl := range it.calls {
				nt.Calls = append(nt.Calls, TurnCall{ID: cl.id, Name: cl.name, Arguments: cl.args})
			}
			for k := range it.results {
				r := &it.results[k]
				text := ""
				if view {
					text = c.viewOf(r)
				} else {
					text = c.textOf(r)
				}
				nt.Results = append(nt.Results, TurnResult{CallID: r.id, Text: text})
			}
		}
		nt.Text = strings.Join(text, "\n")
		nt.UserText = strings.Join(user, "\n")
		out = append(out, nt)
	}
	return out
}

// extractiveSummary is the default summary: the first sentence of each
// dropped text, the tools called with the head of what they returned.
// Deterministic, so two gateways (or a restart) summarise alike.
func extractiveSummary(dropped []Turn) string {
	var b strings.Builder
	results := map[string]string{}
	for _, t := range dropped {
		for _, r := range t.Results {
			results[r.CallID] = r.Text
		}
	}
	for i, t := range dropped {
		var line strings.Builder
		if s := firstSentence(t.UserText, summaryLineMax); s != "" {
			line.WriteString("- User: " + s + "\n")
		}
		if s := firstSentence(t.Text, summaryLineMax); s != "" {
			line.WriteString("- Assistant: " + s + "\n")
		}
		for _, c := range t.Calls {
			line.WriteString("- Called ")
			line.WriteString(c.Name)
			line.WriteByte('(')
			line.WriteString(clipLine(c.Arguments, 80))
			line.WriteByte(')')
			if r, ok := results[c.ID]; ok {
				line.WriteString(" → ")
				line.WriteString(clipLine(r, 120))
			}
			line.WriteByte('\n')
		}
		if b.Len()+line.Len() > newSummaryMax {
			b.WriteString("- … and " + strconv.Itoa(len(dropped)-i) + " more turns\n")
			break
		}
		b.WriteString(line.String())
	}
	return strings.TrimRight(b.String(), "\n")
}

// mergeSummary appends a compression's summary to the run's, dropping the
// oldest lines when the whole would exceed summaryMax.
func mergeSummary(old, add string) string {
	s := add
	if old != "" && add != "" {
		s = old + "\n" + add
	} else if old != "" {
		s = old
	}
	for len(s) > summaryMax {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return clip(s, summaryMax)
		}
		s = s[i+1:]
	}
	return s
}

// requirementWords mark a line of a user message as a hard requirement.
var requirementWords = []string{"must", "never", "always", "do not", "don't", "required", "requirement", "mandatory", "only use", "make sure"}

// extractFacts returns the requirement lines of dropped user text.
func extractFacts(dropped []Turn) []Fact {
	var out []Fact
	for _, t := range dropped {
		for _, line := range strings.Split(t.UserText, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || !isRequirement(line) {
				continue
			}
			v := clip(line, factMax)
			out = append(out, Fact{Key: "req-" + textKey(v)[:8], Value: v, Source: "extractive"})
		}
	}
	return out
}

func isRequirement(line string) bool {
	l := strings.ToLower(line)
	for _, w := range requirementWords {
		i := strings.Index(l, w)
		if i < 0 {
			continue
		}
		// Whole words only: "mustard" and "always-on" are not requirements.
		before := i == 0 || !isWordByte(l[i-1])
		after := i+len(w) == len(l) || !isWordByte(l[i+len(w)])
		if before && after {
			return true
		}
	}
	return false
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// pin adds facts not pinned yet; it never overwrites one. It returns how
// many were added.
func (s *State) pin(facts []Fact) int {
	n := 0
	for _, f := range facts {
		if len(s.Facts) >= factsMax {
			break
		}
		if f.Key == "" || f.Value == "" || s.hasFact(f.Key) {
			continue
		}
		s.Facts = append(s.Facts, f)
		n++
	}
	return n
}

// summariserFacts turns a callback's facts into pinned facts, in key order
// so that the segment is deterministic.
func summariserFacts(m map[string]string) []Fact {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Fact, 0, len(keys))
	for _, k := range keys {
		out = append(out, Fact{Key: clip(k, 80), Value: clip(oneLine(m[k]), factMax), Source: "summariser"})
	}
	return out
}

// segment renders the system segment from the run's state: the pinned
// facts and the summary. It depends on the state alone, so it is the same
// bytes on every call between compressions.
func segment(s *State) string {
	if s.CutEnd == 0 && len(s.Facts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("[haltline context]\n")
	if s.Dropped > 0 {
		b.WriteString("Earlier turns of this conversation (" + strconv.Itoa(s.Dropped) + " messages) were removed to fit the context window; what they established is below.\n")
	}
	if len(s.Facts) > 0 {
		b.WriteString("Pinned facts (they apply throughout):\n")
		for _, f := range s.Facts {
			b.WriteString("- ")
			if f.Source != "extractive" {
				b.WriteString(f.Key)
				b.WriteString(": ")
			}
			b.WriteString(f.Value)
			b.WriteByte('\n')
		}
	}
	if s.Summary != "" {
		b.WriteString("Summary of the removed turns:\n")
		b.WriteString(s.Summary)
		b.WriteByte('\n')
	}
	b.WriteString("[/haltline context]")
	return b.String()
}

// firstSentence returns the first sentence of s on one line, at most max
// bytes.
func firstSentence(s string, max int) string {
	s = oneLine(strings.TrimSpace(s))
	for i := 0; i < len(s); i++ {
		if (s[i] == '.' || s[i] == '!' || s[i] == '?') && (i+1 == len(s) || s[i+1] == ' ') {
			s = s[:i+1]
			break
		}
	}
	return clip(s, max)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clipLine returns clip(oneLine(s), max), joining only the fields the clip
// keeps: a tool output runs to kilobytes and its summary line to a hundred
// bytes. The result never aliases s.
func clipLine(s string, max int) string {
	b := make([]byte, 0, max+1)
	i := 0
	for i < len(s) && len(b) <= max {
		if n := spaceAt(s, i); n > 0 {
			i += n
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		for i < len(s) && len(b) <= max && spaceAt(s, i) == 0 {
			size := 1
			if s[i] >= utf8.RuneSelf {
				_, size = utf8.DecodeRuneInString(s[i:])
			}
			b = append(b, s[i:i+size]...)
			i += size
		}
	}
	return clip(string(b), max)
}

// spaceAt returns the length of the white space (as strings.Fields reads
// it) at s[i], or 0.
func spaceAt(s string, i int) int {
	if c := s[i]; c < utf8.RuneSelf {
		if asciiSpace[c] {
			return 1
		}
		return 0
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if unicode.IsSpace(r) {
		return size
	}
	return 0
}

// asciiSpace is the white space strings.Fields knows below utf8.RuneSelf.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// clip shortens s to at most max bytes on a UTF-8 boundary, marking the cut.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max - len("…")
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}
