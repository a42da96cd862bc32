//go:build amd64 && !purego

#include "textflag.h"

// func countClassesAVX2(b []byte) (low, high int)
//
// Per 32 bytes x: high = x's sign bits; the low class is the bytes that are
// neither high nor above 0x20 (signed compare: high bytes are negative),
// plus the letters, bytes whose x|0x20 lies in 'a'..'z' (0x61..0x7a; high
// bytes stay negative and fail). Each class is a 32-bit mask, counted with
// POPCNT.
TEXT ·countClassesAVX2(SB), NOSPLIT, $0-40
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	XORQ AX, AX
	XORQ BX, BX
	MOVQ $0x2020202020202020, DX
	MOVQ DX, X1
	VPBROADCASTQ X1, Y1
	MOVQ $0x6060606060606060, DX
	MOVQ DX, X2
	VPBROADCASTQ X2, Y2
	MOVQ $0x7b7b7b7b7b7b7b7b, DX
	MOVQ DX, X3
	VPBROADCASTQ X3, Y3
	SHRQ $5, CX
	JZ   done

loop:
	VMOVDQU   (SI), Y0
	VPMOVMSKB Y0, R8        // high
	VPCMPGTB  Y1, Y0, Y4    // x > 0x20
	VPMOVMSKB Y4, R9
	VPOR      Y1, Y0, Y5    // y = x | 0x20
	VPCMPGTB  Y2, Y5, Y6    // y > 0x60
	VPCMPGTB  Y5, Y3, Y7    // 0x7b > y
	VPAND     Y6, Y7, Y6
	VPMOVMSKB Y6, R10       // letters
	ORL       R8, R9
	NOTL      R9            // neither high nor above 0x20
	ORL       R10, R9
	POPCNTL   R9, R9
	ADDQ      R9, AX
	POPCNTL   R8, R8
	ADDQ      R8, BX
	ADDQ      $32, SI
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	MOVQ AX, low+24(FP)
	MOVQ BX, high+32(FP)
	RET
