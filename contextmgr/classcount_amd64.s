//go:build amd64 && !purego

#include "textflag.h"

// func countClassesAVX2(b []byte) (low, high int)
//
// Per 32 bytes x: the low class is the bytes up to 0x20 (unsigned
// minimum) and the letters, bytes whose x|0x20 lies in 'a'..'z'
// (0x61..0x7a; signed compares, in which high bytes are negative and
// fail); the high class is the negative bytes. Each class is counted in
// byte lanes (a match is -1: subtracted), which hold at most 255 steps
// before they are summed into 64-bit lanes (VPSADBW): no scalar work per
// step (a POPCNT of each class's mask, as before the twenty-seventh
// session, made the count half as fast).
TEXT ·countClassesAVX2(SB), NOSPLIT, $0-40
	MOVQ         b_base+0(FP), SI
	MOVQ         b_len+8(FP), CX
	SHRQ         $5, CX
	VPXOR        Y15, Y15, Y15 // zero
	VPXOR        Y10, Y10, Y10 // low, 4 × 64 bits
	VPXOR        Y11, Y11, Y11 // high, 4 × 64 bits
	MOVQ         $0x2020202020202020, DX
	MOVQ         DX, X1
	VPBROADCASTQ X1, Y1
	MOVQ         $0x6060606060606060, DX
	MOVQ         DX, X2
	VPBROADCASTQ X2, Y2
	MOVQ         $0x7b7b7b7b7b7b7b7b, DX
	MOVQ         DX, X3
	VPBROADCASTQ X3, Y3

round:
	TESTQ   CX, CX
	JZ      done
	MOVQ    $255, DX
	CMPQ    CX, DX
	CMOVQLT CX, DX // steps in this round
	SUBQ    DX, CX
	VPXOR   Y8, Y8, Y8 // low, byte lanes
	VPXOR   Y9, Y9, Y9 // high, byte lanes

step:
	VMOVDQU  (SI), Y0
	VPMINUB  Y1, Y0, Y4
	VPCMPEQB Y0, Y4, Y4  // x <= 0x20
	VPOR     Y1, Y0, Y5  // y = x | 0x20
	VPCMPGTB Y2, Y5, Y6  // y > 0x60
	VPCMPGTB Y5, Y3, Y7  // 0x7b > y
	VPAND    Y6, Y7, Y6  // letters
	VPOR     Y4, Y6, Y4  // low
	VPSUBB   Y4, Y8, Y8
	VPCMPGTB Y0, Y15, Y5 // 0 > x: high
	VPSUBB   Y5, Y9, Y9
	ADDQ     $32, SI
	DECQ     DX
	JNZ      step
	VPSADBW  Y15, Y8, Y8
	VPADDQ   Y8, Y10, Y10
	VPSADBW  Y15, Y9, Y9
	VPADDQ   Y9, Y11, Y11
	JMP      round

done:
	VEXTRACTI128 $1, Y10, X12
	VPADDQ       X12, X10, X10
	VPSHUFD      $0x4e, X10, X12
	VPADDQ       X12, X10, X10
	MOVQ         X10, AX
	VEXTRACTI128 $1, Y11, X12
	VPADDQ       X12, X11, X11
	VPSHUFD      $0x4e, X11, X12
	VPADDQ       X12, X11, X11
	MOVQ         X11, BX
	VZEROUPPER
	MOVQ         AX, low+24(FP)
	MOVQ         BX, high+32(FP)
	RET
