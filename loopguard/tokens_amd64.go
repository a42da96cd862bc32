//go:build amd64 && !purego

package loopguard

import "golang.org/x/sys/cpu"

// hasTokenMasks: the vector classification needs AVX2; other CPUs take
// appendNormalized's byte loop all the way.
var hasTokenMasks = cpu.X86.HasAVX2

// tokenMasks classifies b's first 64 bytes (tokens_amd64.s): bit k of
// each mask for b[k].
//
//go:noescape
func tokenMasks(b []byte) (alnum, escape, colon, dash, slash uint64)

// spaceMasks classifies b's first 64 bytes for foldText (tokens_amd64.s).
//
//go:noescape
func spaceMasks(b []byte) (white, space, high uint64)
