package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
)

// LineContext is the enforcement line of context rewriting: in shadow mode
// the rewrite is computed and recorded, and the request goes out as sent.
const LineContext = "context_rewrite"

// rewriteContext keeps the forwarded request under the run's watermark of
// the model's window (DESIGN §1 rewrite stage): a request that fits goes out
// byte for byte; one that does not is rewritten by the context manager,
// which keeps the system prompt, the task, pinned facts and the recent turns,
// and reuses the run's compressed prefix between compressions. The caller
// holds the run's lock.
func (p *Pipeline) rewriteContext(ctx context.Context, t *Turn, g *governance, now time.Time) []byte {
	body := t.Call.Body
	if p.opts.Context == nil || !t.priced || t.price.ContextWindow <= 0 {
		return body
	}
	tighten := false
	if g.budgeted {
		line, err := p.softLine(ctx, g, g.limits.SoftCompress, now)
		tighten = err == nil && line != ""
	}
	wm := contextmgr.Watermark(t.price.ContextWindow, contextmgr.Params{Tighten: tighten})
	if _, needs := g.estimate.NeedsRewrite(t.Req.API, body, wm); !needs {
		return body
	}
	if g.ctx == nil {
		g.ctx = &contextmgr.State{}
	}
	rw := *p.opts.Context
	r := t.run
	if f := p.summariser(t, g, now); f != nil {
		rw.Summarise = f
	}
	shadow := g.term.EnforcementOf(LineContext) == policy.Shadow
	st := g.ctx
	if shadow {
		// The decision is taken exactly as in enforce, on a copy of the
		// state, and only recorded: no blob is kept for a cut that is not
		// forwarded.
		st = g.ctx.Clone()
		rw.Blob = func(string) string { return "(not kept: shadow mode)" }
	} else {
		rw.Blob = func(text string) string {
			h := p.keepBlob(r, g, g.toolState(), text, now)
			return h + " (" + p.blobURL(r.ID, h) + ")"
		}
	}
	out, rep, err := rw.Rewrite(ctx, t.Req.API, body, wm, st)
	if err != nil {
		p.log.Warn("context rewrite failed; forwarding as sent", "run_id", r.ID, "err", err)
		return body
	}
	detail := fmt.Sprintf("%d → %d tokens (watermark %d): %d cut, %d deduplicated, %d dropped",
		rep.TokensBefore, rep.TokensAfter, rep.Watermark, rep.Cut, rep.Deduped, rep.Dropped)
	if shadow {
		p.shadow(r, runstate.Termination{Reason: LineContext, Detail: "would rewrite: " + detail}, t.step, now)
		return body
	}
	r.Record(now, runstate.Event{Type: runstate.EventCompression, Detail: detail})
	p.obs.Compression(t.Req.API.String(), rep.TokensBefore, rep.TokensAfter)
	return out
}
