//go:build !race

package contextmgr

const raceOn = false
