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

// Output cut (docs/design.md §6, §8): a result longer than ToolInlineChars
// characters reaches the agent as its head and tail and a line naming the
// handle of the full text.
const (
	ToolInlineChars = 4096
	ToolHeadChars   = 1500
	ToolTailChars   = 500
)

// ReadBlobTool is the tool the gateway adds to every MCP server's
// tools/list, and to a forwarded model request that holds cut output
// (readback.go): it returns the full text of a cut result by its handle,
// or a slice of it.
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

// blobURL is where the control plane serves a blob of the run with this
// (scoped) id: the run by name, within its tenant.
func (p *Pipeline) blobURL(runID, handle string) string {
	base, _ := p.ToolRegistry().settings()
	return strings.TrimRight(base, "/") + "/api/v1/runs/" + url.PathEscape(runstate.NameOf(runID)) +
		"/blobs/" + url.PathEscape(handle) + "?tenant=" + url.QueryEscape(runstate.TenantOf(runID))
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

// BlobOwner says whose blob a caller may read: the run's (the control
// plane, which addresses runs), or any run's of one tenant (the read tool,
// which knows only the handle and the caller).
type BlobOwner struct{ runID, tenant string }

// BlobOfRun reads the blobs of the run a reference (RunRef) names.
func BlobOfRun(runID string) BlobOwner { return BlobOwner{runID: runID} }

// BlobOfTenant reads the blobs of any run of tenant.
func BlobOfTenant(tenant string) BlobOwner { return BlobOwner{tenant: tenant} }

func (o BlobOwner) owns(runID string) bool {
	if o.runID != "" {
		return runID == o.runID
	}
	return runstate.TenantOf(runID) == o.tenant
}

// Blob returns the full text of a cut result, if owner may read it. A run
// in memory holds its blobs; once it has left, the store does.
func (p *Pipeline) Blob(owner BlobOwner, handle string) (string, error) {
	if owner.runID != "" {
		id, err := p.resolveRun(owner.runID)
		if err != nil {
			return "", err
		}
		owner.runID = id
	}
	if r := p.runs.Lookup(keyBlob + handle); r != nil {
		if !owner.owns(r.ID) {
			return "", ErrNoBlob
		}
		r.Lock()
		defer r.Unlock()
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
	if v == nil || json.Unmarshal(v, &b) != nil || !owner.owns(b.RunID) {
		return "", ErrNoBlob
	}
	return b.Text, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
