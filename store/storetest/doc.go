// Package storetest is the conformance suite of the embedded stores: what
// every implementation of store.Store on a local directory must do, run
// by each one's tests against its own open function.
package storetest
