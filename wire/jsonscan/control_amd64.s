//go:build amd64 && !purego

#include "textflag.h"

// MASK64 stores the 64-bit mask of the byte lanes of lo (bits 0-31) and
// hi (bits 32-63) in out.
#define MASK64(lo, hi, out) \
	VPMOVMSKB lo, AX \
	VPMOVMSKB hi, BX \
	SHLQ      $32, BX \
	ORQ       BX, AX \
	MOVQ      AX, out

// func nextMarked(s string) (off int, quote, backslash, control uint64)
//
// The first whole 64-byte block of s holding a quote, a backslash or a
// byte below 0x20: its offset and the three masks of its bytes (bit k
// for byte k). When none does, off is the length of s's whole blocks and
// the masks are 0.
TEXT ·nextMarked(SB), NOSPLIT, $0-48
	MOVQ         s_base+0(FP), SI
	MOVQ         s_len+8(FP), CX
	SHRQ         $6, CX
	XORQ         DI, DI
	MOVQ         $0x2222222222222222, DX
	MOVQ         DX, X1
	VPBROADCASTQ X1, Y1 // '"'
	MOVQ         $0x5c5c5c5c5c5c5c5c, DX
	MOVQ         DX, X2
	VPBROADCASTQ X2, Y2 // '\\'
	MOVQ         $0x1f1f1f1f1f1f1f1f, DX
	MOVQ         DX, X3
	VPBROADCASTQ X3, Y3 // the highest control byte
	TESTQ        CX, CX
	JZ           none

loop:
	VMOVDQU  (SI)(DI*1), Y4
	VMOVDQU  32(SI)(DI*1), Y5
	VPCMPEQB Y1, Y4, Y6
	VPCMPEQB Y1, Y5, Y7
	VPCMPEQB Y2, Y4, Y8
	VPCMPEQB Y2, Y5, Y9
	VPMINUB  Y3, Y4, Y10
	VPCMPEQB Y4, Y10, Y10 // x <= 0x1f
	VPMINUB  Y3, Y5, Y11
	VPCMPEQB Y5, Y11, Y11
	VPOR     Y6, Y7, Y12
	VPOR     Y8, Y9, Y13
	VPOR     Y10, Y11, Y14
	VPOR     Y12, Y13, Y12
	VPOR     Y12, Y14, Y12
	VPTEST   Y12, Y12
	JNZ      found
	ADDQ     $64, DI
	DECQ     CX
	JNZ      loop

none:
	MOVQ DI, off+16(FP)
	MOVQ $0, quote+24(FP)
	MOVQ $0, backslash+32(FP)
	MOVQ $0, control+40(FP)
	VZEROUPPER
	RET

found:
	MOVQ DI, off+16(FP)
	MASK64(Y6, Y7, quote+24(FP))
	MASK64(Y8, Y9, backslash+32(FP))
	MASK64(Y10, Y11, control+40(FP))
	VZEROUPPER
	RET
