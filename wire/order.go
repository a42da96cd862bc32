package wire

import (
	"bytes"
	"slices"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// ResultsOutOfOrder reports whether the tool results after the last
// assistant turn answer its calls in another order than the calls were
// made: the cheap check, from what ParseRequest read, that tells when
// OrderToolResults has work to do.
func (r *Request) ResultsOutOfOrder() bool {
	last := -1
	for _, tr := range r.ToolResults {
		i := slices.Index(r.LastAssistantToolCallIDs, tr.CallID)
		if i < 0 {
			continue
		}
		if i < last {
			return true
		}
		last = i
	}
	return false
}

// OrderToolResults puts the tool results of a request in the order of the
// calls they answer, so that the model sees one stable, replayable context
// whatever order the agent's tools finished in: chat tool messages after an
// assistant message with tool_calls, Responses *_call_output items after
// their *_call items, Anthropic tool_result blocks inside a user message.
// Only a run of adjacent results moves, sorted by its calls' order, each
// result keeping its own bytes; a run answering a call the request does not
// hold stays as it is, as does everything else. It returns body itself and
// false when nothing moved.
func OrderToolResults(api API, body []byte) ([]byte, bool) {
	s := unsafe.String(unsafe.SliceData(body), len(body))
	var list gjson.Result
	switch api {
	case APIChat, APIMessages:
		list = gjson.Get(s, "messages")
	case APIResponses:
		list = gjson.Get(s, "input")
	}
	if !list.IsArray() || list.Index <= 0 {
		return body, false
	}
	order := map[string]int{}
	var runs [][]gjson.Result
	var cur []gjson.Result
	flush := func() {
		if len(cur) > 1 {
			runs = append(runs, cur)
		}
		cur = nil
	}
	call := func(id string) {
		if _, seen := order[id]; !seen && id != "" {
			order[id] = len(order)
		}
	}
	list.ForEach(func(_, it gjson.Result) bool {
		switch api {
		case APIChat:
			switch it.Get("role").Str {
			case "assistant":
				flush()
				it.Get("tool_calls").ForEach(func(_, c gjson.Result) bool { call(c.Get("id").Str); return true })
			case "tool":
				cur = append(cur, it)
			default:
				flush()
			}
		case APIResponses:
			switch t := it.Get("type").Str; {
			case strings.HasSuffix(t, "_call_output"):
				cur = append(cur, it)
			case strings.HasSuffix(t, "_call"):
				flush()
				call(it.Get("call_id").Str)
			default:
				flush()
			}
		case APIMessages:
			flush()
			role := it.Get("role").Str
			it.Get("content").ForEach(func(_, b gjson.Result) bool {
				switch t := b.Get("type").Str; {
				case role == "assistant" && t == "tool_use":
					call(b.Get("id").Str)
				case role == "user" && t == "tool_result":
					cur = append(cur, b)
				default:
					flush()
				}
				return true
			})
			flush()
		}
		return true
	})
	flush()
	idKey := map[API]string{APIChat: "tool_call_id", APIResponses: "call_id", APIMessages: "tool_use_id"}[api]
	var out bytes.Buffer
	at := 0
	for _, run := range runs {
		pos := make([]int, len(run))
		known := true
		for i, r := range run {
			p, ok := order[r.Get(idKey).Str]
			known = known && ok
			pos[i] = p
		}
		if !known || slices.IsSorted(pos) {
			continue
		}
		sorted := make([]int, len(run))
		for i := range sorted {
			sorted[i] = i
		}
		slices.SortStableFunc(sorted, func(a, b int) int { return pos[a] - pos[b] })
		if out.Len() == 0 {
			out.Grow(len(body))
		}
		// Each slot keeps the separator before it; only the results move.
		for i, r := range run {
			out.WriteString(s[at:r.Index])
			out.WriteString(run[sorted[i]].Raw)
			at = r.Index + len(r.Raw)
		}
	}
	if at == 0 {
		return body, false
	}
	out.WriteString(s[at:])
	return out.Bytes(), true
}
