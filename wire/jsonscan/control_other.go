//go:build !amd64 || purego

package jsonscan

const hasAVX2 = false

func nextMarked(string) (int, uint64, uint64, uint64) {
	panic("jsonscan: no vector string masks on this platform")
}
