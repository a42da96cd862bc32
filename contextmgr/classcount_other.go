//go:build !amd64 || purego

package contextmgr

// countClasses is countClassesGeneric where no vector version exists.
func countClasses(b []byte) (low, high int) { return countClassesGeneric(b) }

func hasVectorClassCount() bool { return false }
