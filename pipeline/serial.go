package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/haltline/haltline/policy"
)

// One side effect at a time (docs/design.md §6): a model offered a tool that
// changes something (L1, L2) is asked for one tool call at a time, and the
// tool routes run a run's L1/L2 calls one after the other in the order
// they arrived, while read-only (L0) calls go on in parallel. Policy lifts
// both with the limits key parallel_side_effects.

// serialTools reports whether the model call must ask for one tool call at
// a time: a tool it offers is not read-only by the registry and policy.
// A tool whose level policy cannot say counts as a side effect.
func (p *Pipeline) serialTools(ctx context.Context, t *Turn, g *governance, now time.Time) bool {
	if !t.Req.HasTools || g.limits.ParallelSideEffects {
		return false
	}
	reg := p.ToolRegistry()
	for _, name := range t.Req.ToolNames() {
		server, entry := reg.resolve(name)
		call := &ToolCall{Name: name, Server: server, Principal: t.Call.Principal}
		d, err := p.toolDecision(ctx, t.run, call, entry, "", now)
		if err != nil || d.Level != policy.LevelReadOnly {
			return true
		}
	}
	return false
}

// serialQueue orders a run's L1/L2 tool calls: each call takes a ticket as
// it passes the gates and waits until the call before it has finished.
type serialQueue struct {
	mu   sync.Mutex
	tail chan struct{} // closed when the last ticket's call has finished
}

// take returns the channel to wait on (nil: go now) and the one to close
// when this call has finished.
func (q *serialQueue) take() (wait <-chan struct{}, done chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wait, done = q.tail, make(chan struct{})
	q.tail = done
	return wait, done
}
