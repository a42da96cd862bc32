package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// LineContext is the enforcement line of context rewriting: in shadow mode
// the rewrite is computed and recorded, and the request goes out as sent.
const LineContext = "context_rewrite"

// orderResults returns the request with its tool results in the order of
// the calls they answer (wire.OrderToolResults): a stable context to replay
// whatever order the tools finished in. The common request pays only the
// check of its last turn against the calls it answers.
func orderResults(t *Turn, g *governance) []byte {
	if !g.ordersResults && !t.Req.ResultsOutOfOrder() {
		return t.Call.Body
	}
	g.ordersResults = true
	body, _ := wire.OrderToolResults(t.Req.API, t.Call.Body)
	return body
}

// rewriteContext keeps the forwarded request under the run's watermark of
// the model's window (docs/design.md §1 rewrite stage): a request that fits goes out
// byte for byte; one that does not is rewritten by the context manager,
// which keeps the system prompt, the task, pinned facts and the recent turns,
// and reuses the run's compressed prefix between compressions. The caller
// holds the run's lock.
func (p *Pipeline) rewriteContext(ctx context.Context, t *Turn, g *governance, now time.Time) []byte {
	body := p.cutToolOutput(t, g, orderResults(t, g), now)
	if p.opts.Context == nil || !t.priced || t.price.ContextWindow <= 0 {
		return body
	}
	tighten := false
	if g.budgeted {
		line, err := p.softLine(ctx, t, g, g.limits.SoftCompress, now)
		tighten = err == nil && line != ""
	}
	wm := contextmgr.Watermark(t.price.ContextWindow, contextmgr.Params{Tighten: tighten})
	if p.offersReadTool(t, g) {
		// The read tool goes in after the rewrite (forward): its room is
		// kept under the watermark now.
		wm -= readToolAllowance
	}
	if !p.overWatermark(t, g, body, wm) {
		return body
	}
	if g.ctx == nil {
		g.ctx = &contextmgr.State{}
	}
	rw, st, shadow := p.rewriter(t, g, now)
	r := t.run
	if f := p.summariser(t, g, now); f != nil {
		rw.Summarise = f
	}
	out, rep, err := rw.Rewrite(ctx, t.Req.API, body, wm, st)
	if err != nil {
		p.log.Warn("context rewrite failed; forwarding as sent", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
		return body
	}
	detail := fmt.Sprintf("%d → %d tokens (watermark %d): %d cut, %d deduplicated, %d dropped",
		rep.TokensBefore, rep.TokensAfter, rep.Watermark, rep.Cut, rep.Deduped, rep.Dropped)
	if shadow {
		p.shadow(r, runstate.Termination{Reason: LineContext, Detail: "would rewrite: " + detail}, t.step, now)
		return body
	}
	r.Record(now, runstate.Event{Type: runstate.EventCompression, Detail: detail})
	if g.holding() {
		api := t.Req.API.String()
		g.hold(func() { p.obs.Compression(api, rep.TokensBefore, rep.TokensAfter) })
	} else {
		p.obs.Compression(t.Req.API.String(), rep.TokensBefore, rep.TokensAfter)
	}
	return out
}

// overWatermark reports whether the body to forward goes over the
// watermark. A body the cut left as the agent sent it was weighed for the
// reservation, and that estimate decides; a cut body is weighed with its
// own cache, so that neither cache loses the prefix its next body begins
// with.
func (p *Pipeline) overWatermark(t *Turn, g *governance, body []byte, wm int64) bool {
	if t.inputEst > 0 && sameBytes(body, t.Call.Body) {
		return t.inputEst > wm
	}
	_, needs := g.cutEstimate.NeedsRewrite(t.Req.API, body, wm)
	return needs
}

// sameBytes reports whether a and b are the same slice (not only equal).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// rewriter is the context manager as the run's policy sets it (the tool
// output limits), with the run's state and its blob store; in shadow mode
// (the context line's enforcement) a copy of the state, and no blob kept
// for a cut that is not forwarded. The caller holds the run's lock.
func (p *Pipeline) rewriter(t *Turn, g *governance, now time.Time) (rw contextmgr.Rewriter, st *contextmgr.State, shadow bool) {
	rw = *p.opts.Context
	to := g.limits.ToolOutput
	rw.InlineLimit, rw.Head, rw.Tail = to.Inline, to.Head, to.Tail
	// The read tool's slices are the cut outputs themselves, asked for.
	rw.Keep = func(tool string) bool { return tool == ReadBlobTool || to.Keeps(tool) }
	if g.ctx == nil {
		g.ctx = &contextmgr.State{}
	}
	st = g.ctx
	r := t.run
	if shadow = g.term.EnforcementOf(LineContext) == policy.Shadow; shadow {
		// The decision is taken exactly as in enforce, on a copy of the
		// state, and only recorded.
		st = g.ctx.Clone()
		rw.Blob = func(string) string { return "(not kept: shadow mode)" }
	} else {
		rw.Blob = func(text string) string {
			h := p.keepBlob(r, g, g.toolState(), text, now)
			return h + " (" + p.blobURL(r.ID, h) + ")"
		}
	}
	return rw, st, shadow
}

// cutToolOutput cuts every tool output over the run's inline limit in the
// request to forward (docs/design.md §6): any API, any model, priced or not, on
// every call of the run, into the same text each time. A tool output is
// named in the run's events the first time it is cut. The caller holds
// the run's lock.
func (p *Pipeline) cutToolOutput(t *Turn, g *governance, body []byte, now time.Time) []byte {
	to := g.limits.ToolOutput
	if p.opts.Context == nil || (to.Whole && len(to.WholeTools) == 0) || !contextmgr.MayCut(body, to.Inline) {
		return body
	}
	rw, st, shadow := p.rewriter(t, g, now)
	out, rep, err := rw.Cut(t.Req.API, body, st)
	r := t.run
	if err != nil {
		p.log.Warn("tool output cut failed; forwarding as sent", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "err", err)
		return body
	}
	if rep.Cut == 0 {
		return body
	}
	for _, c := range rep.NewCuts {
		detail := fmt.Sprintf("%s: %d of %d characters cut; full text: handle %s", c.Tool, c.CutChars, c.Chars, c.Handle)
		if shadow {
			p.shadow(r, runstate.Termination{Reason: LineContext, Detail: "would cut " + detail}, t.step, now)
			continue
		}
		r.Record(now, runstate.Event{Type: runstate.EventToolOutputCut, Detail: detail})
	}
	if shadow {
		return body
	}
	t.cutHeld = true
	if g.holding() {
		g.hold(func() { p.obs.ToolOutputCut(r.Tenant, rep.CutChars, rep.TokensBefore-rep.TokensAfter) })
	} else {
		p.obs.ToolOutputCut(r.Tenant, rep.CutChars, rep.TokensBefore-rep.TokensAfter)
	}
	return out
}
