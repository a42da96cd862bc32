// The harness's build of the gateway in parts adds this file to package
// app (decompose.go, go build -overlay), and a call of decomposeStore to
// the opening of the embedded store. The product has neither.

package app

import (
	"os"

	"github.com/haltline/haltline/store"
)

// decomposeStore makes the gateway in parts write nothing to its store
// when HALTLINE_DECOMPOSE=nostore: every call is governed, metered and
// encoded as usual, and its commit is dropped. -decompose measures the
// gateway so beside the gateway whole, which tells the store's share of a
// call (its log write, the overlay, the checkpoint into bbolt) from the
// rest. A store that drops writes must never be one a configuration of
// the product can choose.
func decomposeStore(st store.Store) store.Store {
	if os.Getenv("HALTLINE_DECOMPOSE") != "nostore" {
		return st
	}
	return droppingStore{st}
}

// droppingStore drops every write and reads from the store it wraps, which
// holds what the gateway wrote before (nothing, in the harness).
type droppingStore struct{ store.Store }

var committed = func() chan error { c := make(chan error); close(c); return c }()

func (droppingStore) Apply([]store.Op) <-chan error         { return committed }
func (droppingStore) Later([]store.Op)                      {}
func (droppingStore) CancelLater(store.Bucket, []byte) bool { return false }
