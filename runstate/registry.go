package runstate

import (
	"sort"
	"sync"
	"time"

	"github.com/zeebo/xxh3"
)

// shards spread the run and lineage maps so that no global lock sits on the
// request path.
const shards = 64

type shard struct {
	mu      sync.RWMutex
	runs    map[string]*Run
	lineage map[string]string // lineage key → run id
}

// Registry holds the live runs and the lineage index.
type Registry struct {
	sh [shards]shard
	// Clock is the registry's time source; tests may replace it.
	Clock func() time.Time
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	g := &Registry{Clock: time.Now}
	for i := range g.sh {
		g.sh[i].runs = map[string]*Run{}
		g.sh[i].lineage = map[string]string{}
	}
	return g
}

// shardOf places a key by its name alone (NameOf), so that the runs of
// every tenant that share a name share a shard, where Named finds them.
func (g *Registry) shardOf(key string) *shard {
	return &g.sh[xxh3.HashString(NameOf(key))%shards]
}

// Get returns a run by id.
func (g *Registry) Get(id string) *Run {
	s := g.shardOf(id)
	s.mu.RLock()
	r := s.runs[id]
	s.mu.RUnlock()
	return r
}

// Named returns the ids of the runs in memory named name, whatever their
// tenant.
func (g *Registry) Named(name string) []string {
	s := g.shardOf(name)
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ids []string
	for id := range s.runs {
		if NameOf(id) == name {
			ids = append(ids, id)
		}
	}
	return ids
}

// GetOrCreate returns the run with id, creating it from ident when absent.
func (g *Registry) GetOrCreate(ident Identity) (r *Run, created bool) {
	s := g.shardOf(ident.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r = s.runs[ident.ID]; r != nil {
		return r, false
	}
	r = newRun(ident, g.Clock())
	s.runs[ident.ID] = r
	return r, true
}

// Adopt adds r unless a run with its id is already there, which it returns.
func (g *Registry) Adopt(r *Run) (*Run, bool) {
	s := g.shardOf(r.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if existing := s.runs[r.ID]; existing != nil {
		return existing, false
	}
	s.runs[r.ID] = r
	return r, true
}

// Lineage key kinds: what a later request can echo back.
const (
	KeyToolCall = "tc:"   // a tool-call id of a model response
	KeyText     = "tx:"   // the hash of an assistant answer's text
	KeyResponse = "resp:" // a Responses API response id
)

// Index maps a lineage key to a run.
func (g *Registry) Index(key, runID string) {
	s := g.shardOf(key)
	s.mu.Lock()
	s.lineage[key] = runID
	s.mu.Unlock()
}

// Unindex drops the lineage keys given, those that still point to run id,
// from memory.
func (g *Registry) Unindex(id string, keys []string) {
	for _, k := range keys {
		s := g.shardOf(k)
		s.mu.Lock()
		if s.lineage[k] == id {
			delete(s.lineage, k)
		}
		s.mu.Unlock()
	}
}

// Lookup returns the run a lineage key points to.
func (g *Registry) Lookup(key string) *Run {
	s := g.shardOf(key)
	s.mu.RLock()
	id, ok := s.lineage[key]
	s.mu.RUnlock()
	if !ok {
		return nil
	}
	return g.Get(id)
}

// Filter selects runs in List.
type Filter struct {
	Status string
	Reason string
	Tenant string
	Since  time.Time
	Limit  int
}

// List returns the records of the runs that match f, newest first.
func (g *Registry) List(f Filter) []Record {
	now := g.Clock()
	var out []Record
	for i := range g.sh {
		s := &g.sh[i]
		s.mu.RLock()
		runs := make([]*Run, 0, len(s.runs))
		for _, r := range s.runs {
			runs = append(runs, r)
		}
		s.mu.RUnlock()
		for _, r := range runs {
			r.Lock()
			ok := (f.Status == "" || string(r.State) == f.Status) &&
				(f.Tenant == "" || r.Tenant == f.Tenant) &&
				(f.Since.IsZero() || !r.Created.Before(f.Since))
			var rec Record
			if ok {
				rec = r.Snapshot(now)
				ok = f.Reason == "" || rec.Reason == f.Reason
			}
			r.Unlock()
			if ok {
				out = append(out, rec)
			}
		}
	}
	return f.Sort(out)
}

// Match reports whether a record passes the filter.
func (f Filter) Match(rec Record) bool {
	return (f.Status == "" || string(rec.Status) == f.Status) &&
		(f.Tenant == "" || rec.Tenant == f.Tenant) &&
		(f.Reason == "" || rec.Reason == f.Reason) &&
		(f.Since.IsZero() || !createdAt(rec).Before(f.Since))
}

// createdAt is a record's creation time. Records are compared by it, not
// by their Created text: RFC 3339 with trailing zeros of the fraction cut
// does not sort as text ("…:01Z" after "…:01.5Z").
func createdAt(rec Record) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, rec.Created)
	return t
}

// Sort orders records newest first (then by id) and applies the limit.
func (f Filter) Sort(out []Record) []Record {
	s := byCreated{out, make([]time.Time, len(out))}
	for i := range out {
		s.at[i] = createdAt(out[i])
	}
	sort.Sort(s)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out
}

// byCreated sorts records newest first, with their creation times parsed
// once.
type byCreated struct {
	recs []Record
	at   []time.Time
}

func (s byCreated) Len() int { return len(s.recs) }
func (s byCreated) Less(i, j int) bool {
	if !s.at[i].Equal(s.at[j]) {
		return s.at[i].After(s.at[j])
	}
	return s.recs[i].ID < s.recs[j].ID
}
func (s byCreated) Swap(i, j int) {
	s.recs[i], s.recs[j] = s.recs[j], s.recs[i]
	s.at[i], s.at[j] = s.at[j], s.at[i]
}

// Count returns the number of runs by state.
func (g *Registry) Count() map[State]int {
	m := map[State]int{}
	for i := range g.sh {
		s := &g.sh[i]
		s.mu.RLock()
		for _, r := range s.runs {
			r.Lock()
			m[r.State]++
			r.Unlock()
		}
		s.mu.RUnlock()
	}
	return m
}

// Remove drops a run and the lineage keys given from memory (the store
// keeps them).
func (g *Registry) Remove(id string, keys []string) {
	g.Unindex(id, keys)
	s := g.shardOf(id)
	s.mu.Lock()
	delete(s.runs, id)
	s.mu.Unlock()
}

// Ended returns the runs that ended before cutoff and have nothing in
// flight: candidates to leave memory.
func (g *Registry) Ended(cutoff time.Time) []*Run {
	return g.collect(func(r *Run) bool {
		return r.State.Final() && r.Inflight == 0 && !r.Ended.IsZero() && r.Ended.Before(cutoff)
	})
}

// Overdue returns the runs whose deadline has passed with nothing in
// flight: an agent that went away leaves its run waiting for a call that
// never comes.
func (g *Registry) Overdue(now time.Time) []*Run {
	return g.collect(func(r *Run) bool {
		return !r.State.Final() && r.Inflight == 0 && r.DeadlineMs > 0 && r.Remaining(now) <= 0
	})
}

// collect returns the runs keep reports, asked under each run's lock; a
// run whose lock is held (a call at work on it) is skipped.
func (g *Registry) collect(keep func(r *Run) bool) []*Run {
	var out []*Run
	g.Each(func(r *Run) {
		if r.TryLock() {
			if keep(r) {
				out = append(out, r)
			}
			r.Unlock()
		}
	})
	return out
}

// Each calls fn with every run in memory, outside the registry's locks
// and without taking the run's.
func (g *Registry) Each(fn func(r *Run)) {
	var runs []*Run
	for i := range g.sh {
		s := &g.sh[i]
		s.mu.RLock()
		runs = runs[:0]
		for _, r := range s.runs {
			runs = append(runs, r)
		}
		s.mu.RUnlock()
		for _, r := range runs {
			fn(r)
		}
	}
}

// Len is the number of runs in memory.
func (g *Registry) Len() int {
	n := 0
	for i := range g.sh {
		s := &g.sh[i]
		s.mu.RLock()
		n += len(s.runs)
		s.mu.RUnlock()
	}
	return n
}
