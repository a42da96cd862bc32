//go:build amd64 && !purego

package contextmgr

import "golang.org/x/sys/cpu"

// hasClassCountAVX2: the vector count needs AVX2 and POPCNT (every x86-64
// CPU since 2013); others take the word loop.
var hasClassCountAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasPOPCNT

// countClassesAVX2 is countClassesGeneric over len(b) rounded down to 32
// bytes, 32 bytes per step (classcount_amd64.s).
//
//go:noescape
func countClassesAVX2(b []byte) (low, high int)

// countClasses is countClassesGeneric, 32 bytes at a time where the CPU
// allows: the class count decides most large bodies, and the word loop
// would be a large share of the gateway's CPU on such calls
// (docs/performance.md).
func countClasses(b []byte) (low, high int) {
	if !hasClassCountAVX2 || len(b) < 32 {
		return countClassesGeneric(b)
	}
	n := len(b) &^ 31
	low, high = countClassesAVX2(b[:n])
	l, h := countClassesGeneric(b[n:])
	return low + l, high + h
}

func hasVectorClassCount() bool { return hasClassCountAVX2 }
