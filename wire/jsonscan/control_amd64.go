//go:build amd64 && !purego

package jsonscan

import "golang.org/x/sys/cpu"

// hasAVX2: the string masks (control_amd64.s) need AVX2; other CPUs read
// strings in machine words.
var hasAVX2 = cpu.X86.HasAVX2

// nextMarked returns the offset of the first whole 64-byte block of s
// holding a quote, a backslash or a control byte, and its masks of each
// (bit k for byte k); when none does, the length of s's whole blocks and
// no marks (control_amd64.s).
//
//go:noescape
func nextMarked(s string) (off int, quote, backslash, control uint64)
