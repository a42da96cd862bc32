//go:build amd64 && !purego

#include "textflag.h"

// HALF classifies the 32 bytes at off(SI) into the five masks' halves.
#define HALF(off, alnum, escape, colon, dash, slash) \
	VMOVDQU   off(SI), Y10  \
	VPOR      Y1, Y10, Y11  \ // y = x | 0x20
	VPCMPGTB  Y2, Y11, Y12  \ // y > 0x60
	VPCMPGTB  Y11, Y3, Y11  \ // 0x7b > y
	VPAND     Y11, Y12, Y12 \ // letters (high bytes are negative: none)
	VPCMPGTB  Y4, Y10, Y11  \ // x > 0x2f
	VPCMPGTB  Y10, Y5, Y13  \ // 0x3a > x
	VPAND     Y11, Y13, Y11 \ // digits
	VPOR      Y11, Y12, Y12 \
	VPMOVMSKB Y12, alnum    \
	VPMINUB   Y6, Y10, Y11  \
	VPCMPEQB  Y10, Y11, Y11 \ // x <= 0x1f
	VPCMPEQB  Y7, Y10, Y12  \ // '"'
	VPOR      Y12, Y11, Y11 \
	VPCMPEQB  Y8, Y10, Y12  \ // '\\'
	VPOR      Y12, Y11, Y11 \
	VPMOVMSKB Y11, escape   \
	VPCMPEQB  Y5, Y10, Y11  \ // ':'
	VPMOVMSKB Y11, colon    \
	VPCMPEQB  Y9, Y10, Y11  \ // '-'
	VPMOVMSKB Y11, dash     \
	VPCMPEQB  Y4, Y10, Y11  \ // '/'
	VPMOVMSKB Y11, slash

// JOIN puts the mask of a block's second half (hi) above its first's (lo).
#define JOIN(lo, hi) \
	SHLQ $32, hi \
	ORQ  hi, lo

#define BROADCAST(c, y) \
	MOVQ         $c, DX \
	MOVQ         DX, X0 \
	VPBROADCASTQ X0, y

// func tokenMasks(b []byte) (alnum, escape, colon, dash, slash uint64)
//
// The classes of b's first 64 bytes that appendNormalized acts on, bit k
// for byte k: ASCII letters and digits, bytes it escapes (below 0x20, a
// quote, a backslash), and the three bytes that may follow the first
// token of a timestamp or a UUID.
TEXT ·tokenMasks(SB), NOSPLIT, $0-64
	MOVQ b_base+0(FP), SI
	BROADCAST(0x2020202020202020, Y1)
	BROADCAST(0x6060606060606060, Y2)
	BROADCAST(0x7b7b7b7b7b7b7b7b, Y3)
	BROADCAST(0x2f2f2f2f2f2f2f2f, Y4)
	BROADCAST(0x3a3a3a3a3a3a3a3a, Y5)
	BROADCAST(0x1f1f1f1f1f1f1f1f, Y6)
	BROADCAST(0x2222222222222222, Y7)
	BROADCAST(0x5c5c5c5c5c5c5c5c, Y8)
	BROADCAST(0x2d2d2d2d2d2d2d2d, Y9)
	HALF(0, AX, BX, CX, DX, R8)
	HALF(32, R9, R10, R11, R12, R13)
	JOIN(AX, R9)
	JOIN(BX, R10)
	JOIN(CX, R11)
	JOIN(DX, R12)
	JOIN(R8, R13)
	VZEROUPPER
	MOVQ AX, alnum+24(FP)
	MOVQ BX, escape+32(FP)
	MOVQ CX, colon+40(FP)
	MOVQ DX, dash+48(FP)
	MOVQ R8, slash+56(FP)
	RET

// SPACES classifies the 32 bytes at off(SI) into spaceMasks' halves.
#define SPACES(off, white, space, high) \
	VMOVDQU   off(SI), Y10  \
	VPCMPEQB  Y1, Y10, Y11  \ // ' '
	VPMOVMSKB Y11, space    \
	VPCMPGTB  Y2, Y10, Y12  \ // x > 0x08
	VPCMPGTB  Y10, Y3, Y13  \ // 0x0e > x
	VPAND     Y12, Y13, Y12 \
	VPOR      Y11, Y12, Y12 \
	VPMOVMSKB Y12, white    \
	VPMOVMSKB Y10, high

// func spaceMasks(b []byte) (white, space, high uint64)
//
// The classes of b's first 64 bytes that foldText acts on, bit k for byte
// k: ASCII white space ('\t' to '\r' and ' '), the spaces among them, and
// the bytes of characters beyond ASCII.
TEXT ·spaceMasks(SB), NOSPLIT, $0-48
	MOVQ b_base+0(FP), SI
	BROADCAST(0x2020202020202020, Y1)
	BROADCAST(0x0808080808080808, Y2)
	BROADCAST(0x0e0e0e0e0e0e0e0e, Y3)
	SPACES(0, AX, BX, CX)
	SPACES(32, R8, R9, R10)
	JOIN(AX, R8)
	JOIN(BX, R9)
	JOIN(CX, R10)
	VZEROUPPER
	MOVQ AX, white+24(FP)
	MOVQ BX, space+32(FP)
	MOVQ CX, high+40(FP)
	RET
