//go:build amd64 && !purego

package jsonscan

import "golang.org/x/sys/cpu"

var hasControlVector = cpu.X86.HasAVX2

// controlVector reports whether s, a multiple of 32 bytes long, holds a
// byte below 0x20 (control_amd64.s).
//
//go:noescape
func controlVector(s string) bool
