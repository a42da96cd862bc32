package pipeline

import (
	"context"
	"strconv"

	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// identify finds the run a call belongs to (DESIGN §3): X-Run-Id, else
// lineage — previous_response_id, the tool-call ids of the last assistant
// turn, the hash of its text — else a new run. A new user message after a
// final answer starts a new run in the same session.
func (p *Pipeline) identify(ctx context.Context, call *Call, req *wire.Request) (r *runstate.Run, created bool, err error) {
	if call.RunID != "" {
		if r, err = p.getRun(call.RunID); r != nil || err != nil {
			return r, false, err
		}
		r, created = p.runs.GetOrCreate(p.identity(call, call.RunID, call.SessionID))
		return r, created, nil
	}
	var prev *runstate.Run
	if req.PreviousResponseID != "" {
		if prev, err = p.lookup(runstate.KeyResponse + req.PreviousResponseID); err != nil {
			return nil, false, err
		}
	}
	if prev == nil {
		for _, id := range req.LastAssistantToolCallIDs {
			if prev, err = p.lookup(runstate.KeyToolCall + id); err != nil {
				return nil, false, err
			}
			if prev != nil {
				break
			}
		}
	}
	if prev == nil && req.LastAssistantTextHash != 0 {
		if prev, err = p.lookup(runstate.KeyText + strconv.FormatUint(req.LastAssistantTextHash, 16)); err != nil {
			return nil, false, err
		}
	}
	if prev != nil {
		prev.Mu.Lock()
		state, session := prev.State, prev.SessionID
		prev.Mu.Unlock()
		// A final answer followed by a new user message is a new task in the
		// same conversation; anything else continues the run (and a run that
		// was ended keeps answering with its termination).
		if !(req.NewUserTurn && (state == runstate.Completed || state == runstate.CompletedWithDegradation)) {
			return prev, false, nil
		}
		sid := session
		if call.SessionID != "" {
			sid = call.SessionID
		}
		r, created = p.runs.GetOrCreate(p.identity(call, runstate.NewRunID(p.now()), sid))
		return r, created, nil
	}
	r, created = p.runs.GetOrCreate(p.identity(call, runstate.NewRunID(p.now()), call.SessionID))
	return r, created, nil
}

func (p *Pipeline) identity(call *Call, id, session string) runstate.Identity {
	if session == "" {
		session = "s-" + id
	}
	return runstate.Identity{
		ID: id, SessionID: session, ParentID: call.ParentRunID, AgentID: call.AgentID,
		TaskType: call.TaskType, Tenant: call.Principal.Tenant, Team: call.Principal.Team,
		User: call.Principal.User,
	}
}

// indexResponse records what a later request will echo back of a response.
func (p *Pipeline) indexResponse(r *runstate.Run, api wire.API, resp *wire.Response) {
	g := govOf(r)
	for _, tc := range resp.ToolCalls {
		if tc.ID != "" {
			p.indexKey(g, runstate.KeyToolCall+tc.ID, r.ID)
		}
	}
	if resp.TextHash != 0 {
		p.indexKey(g, runstate.KeyText+strconv.FormatUint(resp.TextHash, 16), r.ID)
	}
	// Only the Responses API names a previous response (previous_response_id):
	// a chat completion's or a message's id is never looked up.
	if resp.ID != "" && api == wire.APIResponses {
		p.indexKey(g, runstate.KeyResponse+resp.ID, r.ID)
	}
}
