package app

import "runtime"

// tuneProcs gives the Go scheduler a second processor when the process
// can run on one CPU only (its affinity: a sidecar pinned to a core, a
// one-CPU machine), unless GOMAXPROCS is set. With one processor, a
// goroutine that holds it — the store's checkpoint committing a bbolt
// transaction, which cannot yield — holds up every call whose bytes arrive
// meanwhile, until it ends or the runtime preempts it (10 ms); with two,
// the kernel shares the CPU between their threads and runs a woken call's
// at once. Under the load harness at 1,000 req/s (the gateway pinned to
// one core), the added p99 was 1.7–8.7 ms (0.6–3.5 times the floor's in
// the same run, median 1.1) against 9.5–112 ms (3.3–47 times, median 11)
// with one processor, in nine alternated pairs of runs, for a CPU a call
// 1.32 times the floor's against 1.24 (medians). At 200 req/s a call
// costs more CPU with two (855 against 615 µs, a second thread woken and
// put back to sleep); a stream's first byte, measured with the mock
// pausing after it, showed no difference through the machine's noise.
// A second processor only while a checkpoint commits was tried: the added
// p99 fell between the two settings' (the second processor serves more
// than the checkpoint).
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
