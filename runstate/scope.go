package runstate

import "strings"

// A run belongs to its tenant. Two tenants may name runs alike — ticket
// numbers, job ids — and each must get its own run, without learning that
// the other exists. So a run's ID inside the gateway (the registry, the
// store, the ledgers, lineage) is its name scoped by the tenant; the name
// alone is what the agent sent or was given in X-Run-Id, and what records,
// headers and the control plane show beside the tenant.
//
// The separator is a control byte: it cannot occur in an HTTP header value
// (ValidName refuses it in a name), so a name never reaches into the
// tenant's part, and a name's scoped IDs share the prefix name+scopeSep.
const scopeSep = '\x1f'

// ScopedID is the ID of the run named name in tenant's scope. Lineage keys
// are scoped the same way. The empty tenant's scope is the bare name: a
// run stored before runs were scoped belongs to it, and a pipeline driven
// without credentials (replays, tests) names runs as they are.
func ScopedID(tenant, name string) string {
	if tenant == "" {
		return name
	}
	return name + string(scopeSep) + tenant
}

// ScopePrefix is the prefix every ID of name in a named tenant starts
// with, whatever the tenant.
func ScopePrefix(name string) string { return name + string(scopeSep) }

// Scoped reports whether id is the ID of a run of a named tenant, not a
// bare name.
func Scoped(id string) bool { return strings.IndexByte(id, scopeSep) >= 0 }

// NameOf is the name of a run ID, as the agent knows it.
func NameOf(id string) string {
	if i := strings.IndexByte(id, scopeSep); i >= 0 {
		return id[:i]
	}
	return id
}

// TenantOf is the tenant of a scoped run ID ("" for an unscoped one).
func TenantOf(id string) string {
	if i := strings.IndexByte(id, scopeSep); i >= 0 {
		return id[i+1:]
	}
	return ""
}

// MaxNameLen bounds a run, session or parent name sent in a header: it is
// a key of the store, kept for the run's life.
const MaxNameLen = 256

// ValidName reports whether a name sent by an agent (X-Run-Id,
// X-Parent-Run-Id, X-Session-Id) can name a run: at most MaxNameLen bytes,
// none of them a control byte.
func ValidName(s string) bool {
	if len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
