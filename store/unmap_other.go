//go:build !linux

package store

import bolt "go.etcd.io/bbolt"

// releaseMapped is a no-op where MADV_DONTNEED on a shared file mapping is
// not known to keep its content (see unmap_linux.go).
func releaseMapped(*bolt.DB) {}
