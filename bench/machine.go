package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// machineShare is what the harness did not have of the CPUs while it
// measured a round: time the hypervisor gave to other guests (steal), and
// busy time of processes that are not the harness's. On a shared VM these
// move the figures more than most changes to the gateway do; they are
// measured, so a reader can tell a noisy round from a slow build.
// Percentages are of the CPU's time over the round's measurements.
type machineShare struct {
	// On the servers' CPU (mock, floor, nginx, gateways) and on the load
	// generator's; with pinning off, "server" is the whole machine and the
	// load generator's fields are zero.
	ServerStealPct float64 `json:"server_cpu_steal_pct"`
	ServerOtherPct float64 `json:"server_cpu_other_processes_pct"`
	// Interrupt time (mostly loopback packets, the harness's own and
	// others'): the kernel charges it to no process.
	ServerIRQPct  float64 `json:"server_cpu_irq_pct"`
	LoadStealPct  float64 `json:"load_cpu_steal_pct"`
	LoadOtherPct  float64 `json:"load_cpu_other_processes_pct"`
	ServerBusyPct float64 `json:"server_cpu_busy_pct"` // everything but idle and steal
	pinned        bool    // the load generator's CPU was measured apart
}

// cpuStat is one cpu line of /proc/stat, in USER_HZ ticks.
type cpuStat struct {
	user, nice, system, idle, iowait, irq, softirq, steal int64
}

func (c cpuStat) total() int64 {
	return c.user + c.nice + c.system + c.idle + c.iowait + c.irq + c.softirq + c.steal
}

// tasks is time the kernel charges to processes (guest time is in user).
func (c cpuStat) tasks() int64 { return c.user + c.nice + c.system }

func (c cpuStat) sub(o cpuStat) cpuStat {
	return cpuStat{c.user - o.user, c.nice - o.nice, c.system - o.system, c.idle - o.idle,
		c.iowait - o.iowait, c.irq - o.irq, c.softirq - o.softirq, c.steal - o.steal}
}

// parseCPUStat finds the line of /proc/stat whose first field is name
// ("cpu" for the whole machine, "cpu1" for one CPU). Kernels before 2.6.11
// have no steal field: it reads as zero.
func parseCPUStat(stat []byte, name string) (cpuStat, error) {
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || string(f[0]) != name {
			continue
		}
		if len(f) < 5 {
			return cpuStat{}, fmt.Errorf("/proc/stat: short %s line", name)
		}
		var v [8]int64
		for i := range v {
			if i+1 >= len(f) {
				break
			}
			n, err := strconv.ParseInt(string(f[i+1]), 10, 64)
			if err != nil || n < 0 {
				return cpuStat{}, fmt.Errorf("/proc/stat: %s field %d: %q", name, i+1, f[i+1])
			}
			v[i] = n
		}
		return cpuStat{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
	}
	return cpuStat{}, fmt.Errorf("/proc/stat: no %s line", name)
}

// machineProbe takes the readings a machineShare is the difference of.
type machineProbe struct {
	server, load string       // /proc/stat line names; load empty without pinning
	serverPIDs   func() []int // the harness's processes counted on the server side
}

type machineReading struct {
	server, load         cpuStat
	serverOurs, loadOurs time.Duration
}

func newMachineProbe(pl *placement, serverPIDs func() []int) machineProbe {
	if !pl.enabled {
		return machineProbe{server: "cpu", serverPIDs: serverPIDs}
	}
	return machineProbe{server: "cpu" + strconv.Itoa(pl.srvCPU), load: "cpu" + strconv.Itoa(pl.loadCPU), serverPIDs: serverPIDs}
}

func (p machineProbe) read() (machineReading, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineReading{}, err
	}
	var r machineReading
	if r.server, err = parseCPUStat(stat, p.server); err != nil {
		return r, err
	}
	self, err := selfCPU()
	if err != nil {
		return r, err
	}
	for _, pid := range p.serverPIDs() {
		d, err := cpuTime(pid)
		if err != nil {
			return r, err
		}
		r.serverOurs += d
	}
	if p.load == "" {
		r.serverOurs += self // one pool of CPUs: the load generator is on it too
		return r, nil
	}
	if r.load, err = parseCPUStat(stat, p.load); err != nil {
		return r, err
	}
	r.loadOurs = self
	return r, nil
}

// share is what happened between two readings.
func (p machineProbe) share(a, b machineReading) (machineShare, error) {
	srv := b.server.sub(a.server)
	if srv.total() <= 0 {
		return machineShare{}, errors.New("/proc/stat did not advance")
	}
	ticks := func(d time.Duration) int64 { return int64(d * clkTck / time.Second) }
	pct := func(n, of int64) float64 { return round2(100 * float64(max(n, 0)) / float64(of)) }
	m := machineShare{
		ServerStealPct: pct(srv.steal, srv.total()),
		ServerOtherPct: pct(srv.tasks()-ticks(b.serverOurs-a.serverOurs), srv.total()),
		ServerIRQPct:   pct(srv.irq+srv.softirq, srv.total()),
		ServerBusyPct:  pct(srv.total()-srv.idle-srv.iowait-srv.steal, srv.total()),
	}
	if p.load != "" {
		m.pinned = true
		ld := b.load.sub(a.load)
		if ld.total() > 0 {
			m.LoadStealPct = pct(ld.steal, ld.total())
			m.LoadOtherPct = pct(ld.tasks()-ticks(b.loadOurs-a.loadOurs), ld.total())
		}
	}
	return m, nil
}

func (m machineShare) String() string {
	s := fmt.Sprintf("servers' CPU: %.1f %% stolen by the hypervisor, %.1f %% other processes, %.1f %% interrupts, %.0f %% busy",
		m.ServerStealPct, m.ServerOtherPct, m.ServerIRQPct, m.ServerBusyPct)
	if m.pinned {
		s += fmt.Sprintf("; load generator's CPU: %.1f %% stolen, %.1f %% other processes", m.LoadStealPct, m.LoadOtherPct)
	}
	return s
}

// selfCPU is the harness process's user and system time so far.
func selfCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// medianMachine is the median of each share over the rounds that measured
// one, or nil.
func medianMachine(rounds []*round) *machineShare {
	var ms []*machineShare
	for _, rd := range rounds {
		if rd.Machine != nil {
			ms = append(ms, rd.Machine)
		}
	}
	if len(ms) == 0 {
		return nil
	}
	out := &machineShare{pinned: ms[0].pinned}
	for i, dst := range out.fields() {
		v := make([]float64, len(ms))
		for j, m := range ms {
			v[j] = *m.fields()[i]
		}
		*dst = round2(median(v))
	}
	return out
}

// fields are the shares, in one order, for what is done to each alike.
func (m *machineShare) fields() []*float64 {
	return []*float64{&m.ServerStealPct, &m.ServerOtherPct, &m.ServerIRQPct, &m.LoadStealPct, &m.LoadOtherPct, &m.ServerBusyPct}
}

// around runs f and returns, with f's error, the share of the CPUs the
// harness did not have meanwhile; nil when it could not be measured, which
// it says on out.
func (p machineProbe) around(out io.Writer, what string, f func() error) (*machineShare, error) {
	before, perr := p.read()
	err := f()
	var m machineShare
	if perr == nil {
		var after machineReading
		if after, perr = p.read(); perr == nil {
			m, perr = p.share(before, after)
		}
	}
	if perr != nil {
		fmt.Fprintf(out, "  machine during %s: not measured: %v\n", what, perr)
		return nil, err
	}
	fmt.Fprintf(out, "  machine during %s: %s\n", what, m)
	return &m, err
}
