package app

import "runtime"

// tuneProcs gives the Go scheduler a second processor when the process
// can run on one CPU only (its affinity: a sidecar pinned to a core, a
// one-CPU machine), unless GOMAXPROCS is set. With one processor, a
// goroutine that holds it — the store's checkpoint committing a bbolt
// transaction, which cannot yield — holds up every call whose bytes arrive
// meanwhile, until it ends or the runtime preempts it; with two, the
// kernel shares the CPU between their threads and runs a woken call's at
// once. That trades some CPU per call, as a second thread is woken and put
// back to sleep, for a much lower p99 (docs/performance.md, "Tuning below
// the libraries"). The second processor serves more than the checkpoint,
// so it is not given only while a checkpoint commits.
// Not where a CPU quota rather than the affinity makes the one processor:
// two threads would run at once on two cores, spend the quota in half its
// period and be throttled for the rest. It reports the processors it set,
// or 0.
func tuneProcs(getenv func(string) string) int {
	n := procsFor(getenv("GOMAXPROCS"), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	return n
}

// procsFor is the GOMAXPROCS tuneProcs sets, or 0 to leave it: env is the
// GOMAXPROCS variable, cpus the CPUs the affinity allows, current the
// runtime's setting.
func procsFor(env string, cpus, current int) int {
	if env != "" || cpus != 1 || current != 1 {
		return 0
	}
	return 2
}
