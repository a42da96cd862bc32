package pipeline

import (
	"fmt"
	"slices"

	"github.com/haltline/haltline/runstate"
	"github.com/haltline/haltline/store"
)

// The control plane addresses runs by name, as the agents and the records
// know them, and by tenant where two tenants use one name. A reference is
// either: a run name (RunRef(name, "")), found in whichever tenant has it,
// or a name within a tenant (RunRef(name, tenant)).

// RunRef is the reference to the run named name, in tenant when tenant is
// not empty.
func RunRef(name, tenant string) string {
	if tenant == "" {
		return name
	}
	return runstate.ScopedID(tenant, name)
}

// AmbiguousRunError is the answer to a bare name that runs of several
// tenants use: the caller must say which tenant's.
type AmbiguousRunError struct {
	Name    string
	Tenants []string
}

func (e *AmbiguousRunError) Error() string {
	return fmt.Sprintf("runs of %d tenants are named %q: name the tenant", len(e.Tenants), e.Name)
}

// resolveRun turns a reference into a run id. A scoped id is its own; a
// bare name is looked for in memory and in the store, under every tenant
// (the empty tenant's id is the name itself). A name no run has is
// returned as it is, for the lookup that follows to find nothing.
func (p *Pipeline) resolveRun(ref string) (string, error) {
	if runstate.Scoped(ref) {
		return ref, nil
	}
	ids := p.runs.Named(ref)
	if st := p.opts.Store; st != nil {
		add := func(k, _ []byte) error {
			if id := string(k); !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
			return nil
		}
		v, err := st.Get(store.Runs, []byte(ref)) // the empty tenant's
		if err == nil && v != nil {
			err = add([]byte(ref), nil)
		}
		if err == nil {
			err = st.ScanPrefix(store.Runs, []byte(runstate.ScopePrefix(ref)), add)
		}
		if err != nil {
			return "", err
		}
	}
	switch len(ids) {
	case 0:
		return ref, nil
	case 1:
		return ids[0], nil
	}
	e := &AmbiguousRunError{Name: ref}
	for _, id := range ids {
		e.Tenants = append(e.Tenants, runstate.TenantOf(id))
	}
	slices.Sort(e.Tenants)
	return "", e
}
