package store

import (
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// releaseMapped drops the bbolt file's pages from the process's mapping
// (madvise MADV_DONTNEED over the pages bbolt uses, up to its high-water
// mark). bbolt reads the file through a shared, read-only mapping, and
// every page a checkpoint or a read touched stays mapped, counted in the
// process's resident memory, until the mapping goes: under a sustained
// write rate that grows with the file, and can outgrow the heap.
// A checkpoint calls it after each of its transactions, so that what stays
// mapped is what one transaction touched.
// The page cache keeps the pages; a later read maps them again from it,
// with the file's content, so no reader can tell. Called only between
// bbolt's write transactions, on the goroutine that runs them: bbolt
// remaps the file only in one, so the mapping is where bbolt reports it
// and covers the high-water mark. An error is ignored: the pages only
// stay mapped.
func releaseMapped(db *bolt.DB) {
	var size int64
	if db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }) != nil || size <= 0 {
		return
	}
	info := db.Info()
	if info.Data == 0 {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, info.Data, uintptr(size), syscall.MADV_DONTNEED)
}
