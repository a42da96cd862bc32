package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// Read-back (docs/design.md §6): a forwarded request that holds cut tool output
// offers the model the gateway's read tool. When the model's answer calls
// it, the gateway answers the call itself and calls the model again within
// the same client request, so that the agent never sees the tool: it
// receives the final answer, or calls of its own tools.

// ReadBackChars is the default and the largest slice of a cut output one
// call of the read tool returns on a model route.
const ReadBackChars = 8000

// readToolDescription says what the read tool does, in every API.
const readToolDescription = "Returns characters of the full text of a tool result that was cut because it was long. " +
	"Pass the handle named in the cut result; offset (characters from the start, default 0) and length " +
	"(default and at most 8000) choose the slice."

// ReadBlobSchema is the JSON schema of the read tool's arguments.
const ReadBlobSchema = `{"type":"object","properties":{` +
	`"handle":{"type":"string","description":"the handle named in the cut result"},` +
	`"offset":{"type":"integer","description":"first character to return, from 0"},` +
	`"length":{"type":"integer","description":"how many characters to return"}},` +
	`"required":["handle"]}`

// ReadBlobSlice answers a call of the read tool with args, its JSON
// arguments: the slice of the cut output asked for, or what is wrong (bad
// set). limit bounds the slice; 0 leaves it unbounded.
func (p *Pipeline) ReadBlobSlice(owner BlobOwner, args []byte, limit int) (text string, bad bool) {
	var a struct {
		Handle         string
		Offset, Length int
	}
	if json.Unmarshal(args, &a) != nil || a.Handle == "" {
		return ReadBlobTool + " needs a handle argument", true
	}
	full, err := p.Blob(owner, a.Handle)
	if err != nil {
		return "no cut result has the handle " + strconv.Quote(strings.ToValidUTF8(a.Handle[:min(len(a.Handle), 200)], "?")), true
	}
	if a.Offset < 0 || a.Length < 0 {
		return "offset and length count characters from 0", true
	}
	if limit > 0 && (a.Length == 0 || a.Length > limit) {
		a.Length = limit
	}
	if limit == 0 && a.Offset == 0 && a.Length == 0 {
		return full, false
	}
	n := utf8.RuneCountInString(full)
	from := min(a.Offset, n)
	to := n
	if a.Length > 0 {
		to = min(from+a.Length, n)
	}
	i := runeOffset(full, 0, from)
	j := runeOffset(full, i, to-from)
	return fmt.Sprintf("[characters %d to %d of %d]\n%s", from, to, n, full[i:j]), false
}

// runeOffset is the byte offset n characters after byte offset i of s.
func runeOffset(s string, i, n int) int {
	for ; n > 0 && i < len(s); n-- {
		_, sz := utf8.DecodeRuneInString(s[i:])
		i += sz
	}
	return i
}

// readBack notes an answer that calls the read tool of a request that
// offered it: the gateway answers it (ReadBack) instead of the agent. The
// agent's tools of the same answer are not delivered: they are not run,
// and the model may ask for them again once it has read. The caller holds
// the run's lock.
func (p *Pipeline) readBack(t *Turn, resp *wire.Response, now time.Time) bool {
	if !asksRead(t, resp) {
		return false
	}
	r := t.run
	// tool_calls counts the calls the agent received.
	r.Counters.ToolCalls -= int64(len(resp.ToolCalls))
	t.toolCalls = 0
	for _, tc := range resp.ToolCalls {
		detail := "answered by the gateway"
		if tc.Name != ReadBlobTool {
			detail = "not run: the model read a cut output first"
		}
		r.Record(now, runstate.Event{Type: runstate.EventReadBack, Tool: tc.Name, Step: t.step, Detail: detail})
	}
	t.readAnswer = &wire.Response{Text: resp.Text, ToolCalls: resp.ToolCalls}
	return true
}

// asksRead reports an answer that calls the read tool the turn offered.
func asksRead(t *Turn, resp *wire.Response) bool {
	if !t.readOffer {
		return false
	}
	for _, tc := range resp.ToolCalls {
		if tc.Name == ReadBlobTool {
			return true
		}
	}
	return false
}

// ReadBack answers the read tool's calls of the turn's answer, when it
// called the read tool (Finish noted it), and begins the next model call
// of the same client request: the request the turn forwarded, as the
// agent sent it, with the model's answer and the gateway's results after
// it. It returns nil when the answer is the agent's. The new turn is a
// model call of the run like any (its own reservation, usage and events);
// Finish must follow it.
func (p *Pipeline) ReadBack(ctx context.Context, t *Turn) *Turn {
	ans := t.readAnswer
	if ans == nil {
		return nil
	}
	t.readAnswer = nil
	owner := BlobOfTenant(t.run.Tenant)
	results := make([]string, len(ans.ToolCalls))
	for i, tc := range ans.ToolCalls {
		if tc.Name != ReadBlobTool {
			results[i] = notRunReading
			continue
		}
		results[i], _ = p.ReadBlobSlice(owner, tc.Arguments, ReadBackChars)
	}
	var body []byte
	err := errNoRounds
	if tr, ok := t.codec.(wire.ToolRounds); ok {
		body, err = tr.AppendToolRound(t.Call.Body, ans.Text, ans.ToolCalls, results)
	}
	call := *t.Call
	call.Body, call.readRound, call.run = body, t.Call.readRound+1, t.run
	if err != nil {
		next := &Turn{Call: &call, codec: t.codec, started: p.now()}
		next.Answer = errorAnswer(t.codec, wire.ErrBadGateway, "cannot read back a cut output: "+err.Error(), nil)
		return next
	}
	return p.Begin(ctx, &call, t.codec)
}

var errNoRounds = errors.New("the API takes no tool round of the gateway's")

// offersReadTool reports whether the turn's forwarded request offers the
// read tool: it holds cut output, its front end runs the rounds, and the
// policy's rounds are not used up.
func (p *Pipeline) offersReadTool(t *Turn, g *governance) bool {
	return t.cutHeld && t.Call.ReadsBack && t.Call.readRound < g.limits.ToolOutput.Rounds()
}

// readToolAllowance is the room, in estimated tokens, the read tool's
// definition takes in a request (its name, description and schema: some
// 600 characters, and a provider's per-tool framing), kept under the
// watermark for it.
const readToolAllowance = 256

// offerReadTool adds the read tool to body, a request to forward; ok is
// false when the codec cannot.
func offerReadTool(c wire.Codec, body []byte) (out []byte, ok bool) {
	tr, can := c.(wire.ToolRounds)
	if !can {
		return body, false
	}
	out, err := tr.OfferTool(body, ReadBlobTool, readToolDescription, ReadBlobSchema)
	if err != nil {
		return body, false
	}
	return out, true
}

// ReadBackOffered reports that the forwarded request offers the gateway's
// read tool: the front end runs the call's rounds (ReadBack) before the
// client sees any of the answer.
func (t *Turn) ReadBackOffered() bool { return t.readOffer }

// notRunReading is the result of an agent's tool call in an answer that
// also read a cut output: the gateway ran neither for the agent.
const notRunReading = "Not run: a cut tool output was read first. Call this tool again if it is still needed."
