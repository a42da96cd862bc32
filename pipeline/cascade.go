package pipeline

import (
	"context"
	"fmt"

	"github.com/haltline/haltline/pipeline/runtx"
	"github.com/haltline/haltline/runstate"
)

// A run's end ends its sub-agent runs, transitively: a parent
// that is cancelled, or ended by a line, leaves no child working and
// spending. Two ways reach a child:
//
//   - actively, at the parent's end: each run the parent lists (Children,
//     persisted with it, so every replica's copy lists the children any
//     replica started) is ended under its own lock, its calls in flight on
//     this replica cut, and its ended state written for every replica to
//     see at its next lock;
//   - lazily, at each of a child's calls: an ended ancestor ends the child
//     before the call goes anywhere (endedAncestor), which covers a child
//     started after its parent ended and one the active pass has not
//     reached yet.
//
// The active pass runs on its own goroutine: it takes each child's lock
// holding no other, where the parent's end holds the parent's lock, and a
// child's first call holds the child's and takes the parent's to list
// itself (listChild).

// maxAncestors bounds the walk up a run's parents (a chain of sub-agents
// is short; the bound stops a cycle of names).
const maxAncestors = 32

// cascadeOf starts ending r's children after r ended with term; done is
// closed when every child is ended, nil without children. The caller holds
// r's mutex.
func (p *Pipeline) cascadeOf(r *runstate.Run, term runstate.Termination) (done <-chan struct{}) {
	if len(r.Children) == 0 {
		return nil
	}
	children := append([]string(nil), r.Children...)
	ended := childTermination(r.ID, term)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for _, id := range children {
			p.endChild(id, ended)
		}
	}()
	return ch
}

// childTermination is how a run's end is told to its children.
func childTermination(parentID string, term runstate.Termination) runstate.Termination {
	return runstate.Termination{Reason: runstate.ReasonCancelled,
		Detail: fmt.Sprintf("parent run %s ended: %s", runstate.NameOf(parentID), term.Reason)}
}

// endChild ends one child run with term, cuts its calls in flight and
// writes it; its own children follow (terminate).
func (p *Pipeline) endChild(id string, term runstate.Termination) {
	r, unlock, err := p.lockedRun(id)
	if err != nil {
		if err != ErrNoRun {
			// Its next call finds the ended parent (endedAncestor).
			p.log.Warn("ending a sub-agent run failed", "run_id", runstate.NameOf(id), "tenant", runstate.TenantOf(id), "err", err)
		}
		return
	}
	var done <-chan struct{}
	if !r.State.Final() {
		done = p.terminate(r, govOf(r), term, runstate.Cancelled, p.now())
		r.CancelInflight()
		p.wait(p.persist(r), r.ID)
	}
	unlock()
	if done != nil {
		<-done
	}
}

// endedAncestor returns the termination a run's ended parent chain gives
// it, or nil while every ancestor is still going (or completed: a parent
// that answered does not take back what its children do). The caller
// holds r's mutex. An ancestor is read as this replica holds it: with a shared
// store, an end on another replica reaches the child through the child's
// own stored state (the active pass), which its lock reads anyway.
func (p *Pipeline) endedAncestor(r *runstate.Run) *runstate.Termination {
	id := r.ParentID
	for range maxAncestors {
		if id == "" || id == r.ID {
			return nil
		}
		a, err := p.getRun(id)
		if err != nil || a == nil {
			return nil
		}
		a.Lock()
		ended := a.State.Final() && a.Termination != nil
		var term runstate.Termination
		if ended {
			term = *a.Termination
		}
		next := a.ParentID
		a.Unlock()
		if ended {
			t := childTermination(id, term)
			return &t
		}
		id = next
	}
	return nil
}

// listChild lists r in its parent's record, at r's first call: the
// parent's end then finds it wherever it runs. With a shared store the
// parent is brought up to date and written under its lock. The caller
// holds r's mutex and not parent's mutex.
func (p *Pipeline) listChild(ctx context.Context, parent, r *runstate.Run) error {
	tx, err := p.tx.Open(ctx, parent, runtx.Need{})
	if err != nil {
		return err
	}
	defer tx.Close()
	if !parent.AddChild(r.ID) {
		return nil
	}
	saved := p.persist(parent)
	if p.shared() {
		p.wait(saved, parent.ID) // under the lock: the next replica must see it
	}
	return nil
}

// lockedRun finds and locks a run by id (not a reference): the run lock
// across replicas, then the run itself, brought up to date. unlock
// releases both.
func (p *Pipeline) lockedRun(id string) (*runstate.Run, func(), error) {
	r, err := p.getRun(id)
	if err != nil {
		return nil, nil, err
	}
	if r == nil {
		return nil, nil, ErrNoRun
	}
	tx, err := p.tx.Open(context.Background(), r, runtx.Need{})
	if err != nil {
		return nil, nil, err
	}
	return r, tx.Close, nil
}
