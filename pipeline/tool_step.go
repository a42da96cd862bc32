package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/haltline/haltline/policy"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// callPrints are a tool call's fingerprints as strings: its agent's (the
// loop guard's) and any agent's (the key a tool route finds its run by).
type callPrints struct{ agent, anyAgent string }

// governModelToolCalls is the tool step of a model response (called from
// toolStep, with the calls' fingerprints it computed): each tool call is
// indexed for attribution at the tool routes, and asked of haltline.tool.
// A denied call ends the run policy_denied through the turn's pending end:
// the response (streamed or not) is replaced by the ended answer. Approvals are the tool route's: the framework
// runs the call through it.
func (p *Pipeline) governModelToolCalls(t *Turn, g *governance, resp *wire.Response, prints []callPrints, now time.Time) {
	r := t.run
	for i, tc := range resp.ToolCalls {
		p.indexKey(g, toolFPKey(r.Tenant, tc.Name, prints[i].anyAgent), r.ID)
		if p.pol == nil || t.pendingEnd != nil {
			continue
		}
		server, entry := p.ToolRegistry().resolve(tc.Name)
		in := policy.ToolInput{RunInput: runInput(r, t.Call.Principal, now), Tool: policy.ToolInfo{
			Name: tc.Name, Server: server, Level: entry.Level, Hints: entry.Hints, Arguments: tc.Arguments,
			Fingerprint: prints[i].agent}}
		d, err := p.pol.Tool(context.Background(), in)
		detail := ""
		switch {
		case err != nil:
			// Fail closed: a policy that cannot answer never allows.
			p.log.Error("tool policy failed", "run_id", runstate.NameOf(r.ID), "tenant", runstate.TenantOf(r.ID), "tool", tc.Name, "err", err)
			detail = fmt.Sprintf("tool call %s: policy unavailable", tc.Name)
		case !d.Allow:
			detail = fmt.Sprintf("tool call %s denied: %s", tc.Name, d.Reason)
		default:
			continue
		}
		term := runstate.Termination{Reason: runstate.ReasonPolicyDenied, Detail: detail}
		if g.term.EnforcementOf(term.Reason) == policy.Shadow {
			p.shadow(r, term, t.step, now)
			continue
		}
		t.pendingEnd = &term
	}
}
