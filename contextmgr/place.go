package contextmgr

import (
	"encoding/json"
	"strings"
	"unsafe"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/jsonscan"
	"github.com/tidwall/sjson"
)

// placement is where the state's segment goes in the forwarded body.
type placement struct {
	kind placeKind
	// placeBody: the envelope (the body with "[]" for the list) with the
	// system part edited, and the offset of its "[]". Also what the edit
	// is, for bodies the reader could not locate the list in.
	env           []byte
	envList       int
	editPath      string
	editValue     any
	envW          int64
	envTools      bool
	first         []byte // placeFirst: the first item with the segment; placePrepend: a system message of its own
	firstW        int64
	firstTools    bool
	firstReplaced bool // first stands for item 0 (placeFirst) rather than before it
}

type placeKind uint8

const (
	placeNone    placeKind = iota // no segment
	placeBody                     // appended to the system text of the envelope (Anthropic system, Responses instructions)
	placeFirst                    // appended to the first (system) message
	placePrepend                  // a system message of its own at the front
)

// envelope returns the body with "[]" in place of the list, and the
// offset of the "[]".
func (p *plan) envelope() ([]byte, int) {
	c := p.c
	if c.listEnd == 0 {
		return p.body, -1
	}
	if p.env == nil {
		p.env = make([]byte, 0, c.listStart+2+len(p.body)-c.listEnd)
		p.env = append(p.env, p.body[:c.listStart]...)
		p.env = append(p.env, "[]"...)
		p.env = append(p.env, p.body[c.listEnd:]...)
	}
	return p.env, c.listStart
}

// placement returns where the segment goes: appended to the system text
// the agent sent (so that the agent's own system prompt stays the cached
// prefix), or as a system message of its own at the front.
func (p *plan) placement() (*placement, error) {
	seg := p.segment()
	pl := &p.place
	if p.placeOK {
		return pl, nil
	}
	c := p.c
	*pl = placement{envW: c.envW, envTools: c.envTools}
	p.placeOK = true
	if seg == "" {
		return pl, nil
	}
	env, ls := p.envelope()
	switch c.api {
	case wire.APIMessages:
		sys := memberOf(env, "system")
		switch {
		case sys.IsString() && sys.String() != "":
			pl.editPath, pl.editValue = "system", sys.String()+"\n\n"+seg
		case sys.IsArray() && hasElements(sys):
			pl.editPath, pl.editValue = "system.-1", map[string]string{"type": "text", "text": seg}
		default:
			pl.editPath, pl.editValue = "system", seg
		}
	case wire.APIResponses:
		if in := memberOf(env, "instructions"); in.IsString() && in.String() != "" {
			pl.editPath, pl.editValue = "instructions", in.String()+"\n\n"+seg
		}
	}
	if pl.editPath != "" {
		pl.kind = placeBody
		if ls < 0 {
			return pl, nil
		}
		edited, err := sjson.SetBytes(env, pl.editPath, pl.editValue)
		if err != nil {
			return nil, err
		}
		// The edit sits before the list, shifting it, or after it.
		pl.env, pl.envList = edited, ls
		if commonPrefix(env, edited) < ls+2 {
			if commonSuffix(env, edited) < len(env)-ls {
				// The edit reached into the list: leave the body to the
				// path edit.
				c.exact, c.listEnd = false, 0
				p.placeOK = false
				return p.placement()
			}
			pl.envList += len(edited) - len(env)
		}
		pl.envW, pl.envTools = scan(edited, c.api != wire.APIMessages)
		return pl, nil
	}
	partType := "text"
	if c.api == wire.APIResponses {
		partType = "input_text"
	}
	if len(c.items) > 0 && c.items[0].kind == kindSystem && (c.items[0].role == "system" || c.items[0].role == "developer") {
		first := c.items[0].raw
		if c.items[0].replaced {
			var err error
			if first, err = p.appendItem(nil, &c.items[0]); err != nil {
				return nil, err
			}
		}
		content := memberOf(first, "content")
		var nr []byte
		var err error
		switch {
		case content.IsString():
			nr, err = sjson.SetBytes(first, "content", content.String()+"\n\n"+seg)
		case content.IsArray():
			nr, err = sjson.SetBytes(first, "content.-1", map[string]string{"type": partType, "text": seg})
		}
		if err != nil {
			return nil, err
		}
		if nr != nil {
			pl.kind, pl.first, pl.firstReplaced = placeFirst, nr, true
			pl.firstW, pl.firstTools = scan(nr, c.api != wire.APIMessages)
			return pl, nil
		}
	}
	msg, err := json.Marshal(map[string]string{"role": "system", "content": seg})
	if err != nil {
		return nil, err
	}
	pl.kind, pl.first = placePrepend, msg
	pl.firstW, pl.firstTools = scan(msg, c.api != wire.APIMessages)
	return pl, nil
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}

// memberOf returns the member name of the object b holds, copied out of b
// (texts made of it outlive the buffer).
func memberOf(b []byte, name string) jsonscan.Value {
	v := jsonscan.Parse(unsafe.String(unsafe.SliceData(b), len(b))).Get(name)
	v.Raw = strings.Clone(v.Raw)
	return v
}

// hasElements reports whether the array v holds any element.
func hasElements(v jsonscan.Value) bool {
	found := false
	v.ForEach(func(string, int, jsonscan.Value) bool {
		found = true
		return false
	})
	return found
}
