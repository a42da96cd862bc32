//go:build amd64 && !purego

#include "textflag.h"

// func controlVector(s string) bool
//
// The bytewise minimum of s (len a multiple of 32), 64 bytes a step in two
// accumulators, is below 0x20 exactly when a byte of s is.
TEXT ·controlVector(SB), NOSPLIT, $0-17
	MOVQ     s_base+0(FP), SI
	MOVQ     s_len+8(FP), CX
	VPCMPEQB Y0, Y0, Y0 // 0xff: the minimum of nothing
	VMOVDQU  Y0, Y1
	MOVQ     CX, DX
	SHRQ     $6, CX
	JZ       tail

loop:
	VPMINUB (SI), Y0, Y0
	VPMINUB 32(SI), Y1, Y1
	ADDQ    $64, SI
	DECQ    CX
	JNZ     loop

tail:
	ANDQ    $32, DX
	JZ      done
	VPMINUB (SI), Y0, Y0

done:
	VPMINUB      Y1, Y0, Y0
	MOVQ         $0x2020202020202020, DX
	MOVQ         DX, X2
	VPBROADCASTQ X2, Y2
	VPMAXUB      Y2, Y0, Y3 // max(min, 0x20) == min where min >= 0x20
	VPCMPEQB     Y0, Y3, Y3
	VPMOVMSKB    Y3, AX
	VZEROUPPER
	NOTL         AX
	TESTL        AX, AX
	SETNE        ret+16(FP)
	RET
