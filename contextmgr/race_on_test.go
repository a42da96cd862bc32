//go:build race

package contextmgr

// raceOn trims the generated cases under the race detector, which slows
// this CPU-bound package down some forty times; the full counts run
// without it.
const raceOn = true
