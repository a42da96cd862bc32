//go:build !haltline_decompose

package app

import "github.com/haltline/haltline/store"

// decomposeStore is the store itself in release builds (see decompose.go).
func decomposeStore(st store.Store) store.Store { return st }
