package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// Output cut (DESIGN §6, §8): a result longer than ToolInlineChars
// characters reaches the agent as its head and tail and a line naming the
// handle of the full text.
const (
	ToolInlineChars = 4096
	ToolHeadChars   = 1500
	ToolTailChars   = 500
)

// ReadBlobTool is the tool the gateway adds to every MCP server's
// tools/list: it returns the full text of a cut result by its handle.
const ReadBlobTool = "haltline_read_blob"

// ErrNoBlob means no run holds a blob by that handle.
var ErrNoBlob = errors.New("no such blob")

func cutNeeded(text string) bool {
	return len(text) > ToolInlineChars && utf8.RuneCountInString(text) > ToolInlineChars
}

// cutText keeps the first ToolHeadChars and last ToolTailChars characters
// (never splitting one) and names the handle and its URL.
func cutText(text, handle, link string) string {
	n := utf8.RuneCountInString(text)
	head, i := 0, 0
	for i < len(text) && head < ToolHeadChars {
		_, sz := utf8.DecodeRuneInString(text[i:])
		i += sz
		head++
	}
	j, tail := len(text), 0
	for j > i && tail < ToolTailChars {
		_, sz := utf8.DecodeLastRuneInString(text[:j])
		j -= sz
		tail++
	}
	var b strings.Builder
	b.Grow(i + (len(text) - j) + 256)
	b.WriteString(text[:i])
	fmt.Fprintf(&b, "\n[… %d characters cut …]\n", n-head-tail)
	b.WriteString(text[j:])
	fmt.Fprintf(&b, "\n[haltline: output cut from %d characters; full text: handle %s, %s — or call the %s tool with this handle]",
		n, handle, link, ReadBlobTool)
	return b.String()
}

// blobURL is where the control plane serves a blob.
func (p *Pipeline) blobURL(runID, handle string) string {
	base, _ := p.ToolRegistry().settings()
	return strings.TrimRight(base, "/") + "/api/v1/runs/" + url.PathEscape(runID) + "/blobs/" + url.PathEscape(handle)
}

// keepBlob stores a full text behind a new handle, for the run's life.
func (p *Pipeline) keepBlob(r *runstate.Run, g *governance, ts *toolState, text string, now time.Time) string {
	handle := runstate.NewID("b-")
	ts.blobs[handle] = text
	p.runs.Index(keyBlob+handle, r.ID)
	if p.opts.Store != nil {
		if v, err := json.Marshal(blobRecord{RunID: r.ID, Text: text}); err == nil {
			g.queue(store.Op{Bucket: store.Blobs, Key: []byte(handle), Value: v})
			g.own(ownedBlob, handle)
		}
	}
	return handle
}

// Blob returns the full text of a cut result. runID may be "" when only
// the handle is known (the read tool). A run in memory holds its blobs;
// once it has left, the store does.
func (p *Pipeline) Blob(runID, handle string) (string, error) {
	if r := p.runs.Lookup(keyBlob + handle); r != nil {
		if runID != "" && r.ID != runID {
			return "", ErrNoBlob
		}
		r.Mu.Lock()
		defer r.Mu.Unlock()
		if g := govOf(r); g != nil && g.tools != nil {
			if text, ok := g.tools.blobs[handle]; ok {
				return text, nil
			}
		}
		return "", ErrNoBlob
	}
	if p.opts.Store == nil {
		return "", ErrNoBlob
	}
	v, err := p.opts.Store.Get(store.Blobs, []byte(handle))
	if err != nil {
		return "", err
	}
	var b blobRecord
	if v == nil || json.Unmarshal(v, &b) != nil || (runID != "" && b.RunID != runID) {
		return "", ErrNoBlob
	}
	return b.Text, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
