//go:build !amd64 || purego

package loopguard

const hasTokenMasks = false

func tokenMasks([]byte) (alnum, escape, colon, dash, slash uint64) {
	panic("loopguard: no vector token masks on this platform")
}

func spaceMasks([]byte) (white, space, high uint64) {
	panic("loopguard: no vector space masks on this platform")
}
