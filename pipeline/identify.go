package pipeline

import (
	"context"
	"fmt"
	"strconv"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/wire"
)

// identify finds the run a call belongs to (docs/design.md §3): X-Run-Id, else
// lineage — previous_response_id, the tool-call ids of the last assistant
// turn, the hash of the conversation up to it — else a new run. A new user
// message after a final answer starts a new run in the same session. Every
// id and lineage key is looked up within the caller's tenant only: a name
// another tenant uses is a run of the caller's own, and nothing here tells
// whether the other exists.
//
// When replicas share the store, a run named by X-Run-Id that this
// replica does not hold is not read here: identify returns its id as
// named, for Begin to find it in the round trip of its lock (openNamed),
// which reads the run's snapshot anyway.
func (p *Pipeline) identify(ctx context.Context, call *Call, req *wire.Request) (r *runstate.Run, created bool, named string, err error) {
	if call.run != nil {
		return call.run, false, "", nil // a read-back round of the run's call
	}
	tenant := call.Principal.Tenant
	if call.RunID != "" {
		id := runstate.ScopedID(tenant, call.RunID)
		if p.shared() {
			if r = p.runs.Get(id); r != nil {
				return r, false, "", nil
			}
			return nil, false, id, nil
		}
		if r, err = p.getRun(id); r != nil || err != nil {
			return r, false, "", err
		}
		r, created = p.runs.GetOrCreate(p.identity(call, id, call.SessionID))
		return r, created, "", nil
	}
	var prev *runstate.Run
	if req.PreviousResponseID != "" {
		if prev, err = p.lookup(lineageKey(tenant, runstate.KeyResponse, req.PreviousResponseID)); err != nil {
			return nil, false, "", err
		}
	}
	if prev == nil {
		for _, id := range req.LastAssistantToolCallIDs {
			if prev, err = p.lookup(lineageKey(tenant, runstate.KeyToolCall, id)); err != nil {
				return nil, false, "", err
			}
			if prev != nil {
				break
			}
		}
	}
	if prev == nil && req.LastAssistantTextHash != 0 {
		key := textLineageKey(tenant, req.LastAssistantPrefixHash, req.LastAssistantTextHash)
		if prev, err = p.lookup(key); err != nil {
			return nil, false, "", err
		}
	}
	if prev != nil {
		prev.Lock()
		state, session := prev.State, prev.SessionID
		prev.Unlock()
		// A final answer followed by a new user message is a new task in the
		// same conversation; anything else continues the run (and a run that
		// was ended keeps answering with its termination).
		if !(req.NewUserTurn && (state == runstate.Completed || state == runstate.CompletedWithDegradation)) {
			return prev, false, "", nil
		}
		sid := session
		if call.SessionID != "" {
			sid = call.SessionID
		}
		r, created = p.runs.GetOrCreate(p.identity(call, p.newRunID(tenant), sid))
		return r, created, "", nil
	}
	r, created = p.runs.GetOrCreate(p.identity(call, p.newRunID(tenant), call.SessionID))
	return r, created, "", nil
}

// checkRunNames refuses run, parent and session names that cannot name a
// run (runstate.ValidName).
func checkRunNames(run, parent, session string) error {
	for _, h := range [...]struct{ header, value string }{
		{"X-Run-Id", run}, {"X-Parent-Run-Id", parent}, {"X-Session-Id", session},
	} {
		if !runstate.ValidName(h.value) {
			return fmt.Errorf("%s: at most %d bytes, no control characters", h.header, runstate.MaxNameLen)
		}
	}
	return nil
}

// openNamed opens the transaction of the run id, which identify left to
// be found under its lock (named): brought back from the snapshot the
// lock read, or made anew when none is stored (created).
// free, when set, is a release to send in the lock's round trip.
func (p *Pipeline) openNamed(ctx context.Context, call *Call, id string, free accounting.Rider) (tx runtx.Tx, r *runstate.Run, created bool, err error) {
	defer p.freed(ctx, id, free)
	tx, r, err = p.tx.OpenNamed(ctx, id, runtx.Need{Ledger: true, Rider: free}, func(v []byte, read bool) (*runstate.Run, error) {
		var found *runstate.Run
		var err error
		switch {
		case !read:
			found, err = p.getRun(id)
		case v != nil:
			found, err = p.reviveStored(id, v)
		}
		if err != nil || found != nil {
			return found, err
		}
		found, created = p.runs.GetOrCreate(p.identity(call, id, call.SessionID))
		return found, nil
	})
	return tx, r, created, err
}

// newRunID names a new run and scopes it by its tenant.
func (p *Pipeline) newRunID(tenant string) string {
	return runstate.ScopedID(tenant, runstate.NewRunID(p.now()))
}

// lineageKey is a lineage key of kind within tenant's scope.
func lineageKey(tenant, kind, value string) string {
	return runstate.ScopedID(tenant, kind+value)
}

// textLineageKey is the lineage key of an assistant answer's text: the
// conversation before it (prefix) and the text together, so that two
// conversations whose assistant said the same words are not one run.
func textLineageKey(tenant string, prefix, text uint64) string {
	return lineageKey(tenant, runstate.KeyText, strconv.FormatUint(wire.ConversationKey(prefix, text), 16))
}

// identity is the identity of a new run with the given (scoped) id. The
// parent is named in the caller's tenant, as the run itself is.
func (p *Pipeline) identity(call *Call, id, session string) runstate.Identity {
	if session == "" {
		session = "s-" + runstate.NameOf(id)
	}
	var parent string
	if call.ParentRunID != "" {
		parent = runstate.ScopedID(call.Principal.Tenant, call.ParentRunID)
	}
	return runstate.Identity{
		ID: id, SessionID: session, ParentID: parent, AgentID: call.AgentID,
		TaskType: call.TaskType, Tenant: call.Principal.Tenant, Team: call.Principal.Team,
		User: call.Principal.User,
	}
}

// indexResponse records what a later request will echo back of a response.
// req is the request the response answers: the conversation the answer's
// text follows.
func (p *Pipeline) indexResponse(r *runstate.Run, req *wire.Request, resp *wire.Response) {
	g := govOf(r)
	for _, tc := range resp.ToolCalls {
		if tc.ID != "" {
			p.indexKey(g, lineageKey(r.Tenant, runstate.KeyToolCall, tc.ID), r.ID)
		}
	}
	if resp.TextHash != 0 {
		p.indexKey(g, textLineageKey(r.Tenant, req.ConversationHash, resp.TextHash), r.ID)
	}
	// Only the Responses API names a previous response (previous_response_id):
	// a chat completion's or a message's id is never looked up.
	if resp.ID != "" && req.API == wire.APIResponses {
		p.indexKey(g, lineageKey(r.Tenant, runstate.KeyResponse, resp.ID), r.ID)
	}
}
