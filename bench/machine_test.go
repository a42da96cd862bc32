package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseCPUStat(t *testing.T) {
	linux, err := os.ReadFile("testdata/proc_stat_2cpu.txt")
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile("testdata/proc_stat_old.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc, name string
		stat       []byte
		want       cpuStat
		err        string
	}{
		{"machine", "cpu", linux, cpuStat{728817, 280, 183190, 1371206, 9015, 0, 45569, 101856}, ""},
		{"one CPU, not a prefix match", "cpu1", linux, cpuStat{405489, 145, 96994, 638001, 6853, 0, 28534, 52586}, ""},
		{"no such CPU", "cpu7", linux, cpuStat{}, "no cpu7 line"},
		{"a kernel without steal", "cpu0", old, cpuStat{user: 1, nice: 2, system: 3, idle: 4}, ""},
		{"short line", "cpu", []byte("cpu 1 2\n"), cpuStat{}, "short"},
		{"not a number", "cpu", []byte("cpu 1 2 x 4\n"), cpuStat{}, "field 3"},
		{"negative", "cpu", []byte("cpu 1 2 -3 4\n"), cpuStat{}, "field 3"},
	} {
		got, err := parseCPUStat(tc.stat, tc.name)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.desc, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.desc, err)
		case got != tc.want:
			t.Errorf("%s: %+v, want %+v", tc.desc, got, tc.want)
		}
	}
}

// share turns two readings into percentages of each CPU's time: steal,
// busy time of processes other than the harness's, interrupts.
func TestMachineShare(t *testing.T) {
	p := machineProbe{server: "cpu1", load: "cpu0"}
	a := machineReading{
		server: cpuStat{user: 1000, system: 500, idle: 5000, softirq: 100, steal: 50},
		load:   cpuStat{user: 2000, idle: 3000, steal: 10},
	}
	// 1,000 ticks pass on each CPU. Server: 600 ticks of tasks, of which
	// the harness's processes used 4.5 s (450 ticks); 20 of softirq, 30
	// stolen, the rest idle. Load: 500 of tasks, the harness 5 s; 100
	// stolen.
	b := machineReading{
		server:     cpuStat{user: 1400, system: 700, idle: 5350, softirq: 120, steal: 80},
		load:       cpuStat{user: 2500, idle: 3400, steal: 110},
		serverOurs: 4500 * time.Millisecond,
		loadOurs:   5 * time.Second,
	}
	got, err := p.share(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := machineShare{ServerStealPct: 3, ServerOtherPct: 15, ServerIRQPct: 2, ServerBusyPct: 62, LoadStealPct: 10, LoadOtherPct: 0, pinned: true}
	if got != want {
		t.Errorf("share = %+v, want %+v", got, want)
	}
	// The harness's own processes can show more time than the CPU's task
	// counter over a short window (ticks are sampled): never negative.
	b.serverOurs = time.Hour
	if got, _ := p.share(a, b); got.ServerOtherPct != 0 {
		t.Errorf("other processes %v %%, want 0", got.ServerOtherPct)
	}
	if _, err := p.share(a, a); err == nil {
		t.Error("two equal readings gave a share")
	}
}

// The probe reads this machine: on Linux, /proc/stat has the CPUs the
// placement names.
func TestMachineProbeReadsProc(t *testing.T) {
	pl := placement{}
	p := newMachineProbe(&pl, func() []int { return []int{os.Getpid()} })
	r, err := p.read()
	if err != nil {
		t.Fatal(err)
	}
	if r.server.total() <= 0 || r.serverOurs <= 0 {
		t.Errorf("reading %+v: no time counted", r)
	}
}

func FuzzParseCPUStat(f *testing.F) {
	if b, err := os.ReadFile("testdata/proc_stat_2cpu.txt"); err == nil {
		f.Add(b, "cpu1")
	}
	f.Add([]byte("cpu 1 2 3 4\n"), "cpu")
	f.Add([]byte("cpu0 99999999999999999999 1 1 1\n"), "cpu0")
	f.Fuzz(func(t *testing.T, stat []byte, name string) {
		c, err := parseCPUStat(stat, name)
		if err != nil {
			return
		}
		for _, v := range []int64{c.user, c.nice, c.system, c.idle, c.iowait, c.irq, c.softirq, c.steal} {
			if v < 0 {
				t.Fatalf("negative field in %+v", c)
			}
		}
	})
}

// The report's machine line is each share's median over the rounds that
// measured one.
func TestMedianMachine(t *testing.T) {
	if m := medianMachine([]*round{{}, {}}); m != nil {
		t.Errorf("no round measured, got %+v", m)
	}
	rounds := []*round{
		{Machine: &machineShare{ServerStealPct: 7.8, ServerOtherPct: 0, ServerIRQPct: 4.8, LoadStealPct: 8, LoadOtherPct: 1, ServerBusyPct: 40, pinned: true}},
		{}, // not measured: left out
		{Machine: &machineShare{ServerStealPct: 2.2, ServerOtherPct: 3, ServerIRQPct: 4.4, LoadStealPct: 2.3, LoadOtherPct: 0, ServerBusyPct: 38, pinned: true}},
		{Machine: &machineShare{ServerStealPct: 1.4, ServerOtherPct: 1, ServerIRQPct: 4, LoadStealPct: 1.5, LoadOtherPct: 2, ServerBusyPct: 35, pinned: true}},
	}
	want := machineShare{ServerStealPct: 2.2, ServerOtherPct: 1, ServerIRQPct: 4.4, LoadStealPct: 2.3, LoadOtherPct: 1, ServerBusyPct: 38, pinned: true}
	if got := medianMachine(rounds); got == nil || *got != want {
		t.Errorf("median %+v, want %+v", got, want)
	}
}
