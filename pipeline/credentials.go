package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Credentials resolve the key an agent presents (docs/design.md §3). With virtual
// keys configured, the key must be one of them: it names tenant, team and
// user and is never forwarded. Without them, the agent's own key passes
// through to the provider and names the tenant by its hash.
type Credentials struct {
	VirtualKeys map[string]Principal
}

// Resolve returns the principal of a key; ok is false for an unknown key
// when virtual keys are in force.
func (c Credentials) Resolve(key string) (p Principal, ok bool) {
	if len(c.VirtualKeys) > 0 {
		p, ok = c.VirtualKeys[key]
		if ok {
			p.KeyID = KeyID(key)
		}
		return p, ok
	}
	if key == "" {
		return Principal{Tenant: "anonymous"}, true
	}
	id := KeyID(key)
	return Principal{Tenant: "key-" + id, KeyID: id}, true
}

// AgentKey extracts the key from an Authorization: Bearer or x-api-key
// header value.
func AgentKey(authorization, xAPIKey string) string {
	if len(authorization) > 7 && strings.EqualFold(authorization[:7], "bearer ") {
		return strings.TrimSpace(authorization[7:])
	}
	return strings.TrimSpace(xAPIKey)
}

// KeyID names a key without revealing it.
func KeyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
