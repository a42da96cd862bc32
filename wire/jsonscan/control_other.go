//go:build !amd64 || purego

package jsonscan

const hasControlVector = false

func controlVector(string) bool { panic("jsonscan: no vector control check on this platform") }
