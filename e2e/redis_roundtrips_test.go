package e2e

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rttProxy stands between the gateways and Redis on loopback and counts
// round trips: on each connection, one is what the client sends until
// the server's reply starts (a command, a pipeline and a MULTI/EXEC are
// one each, as the client waits for each reply before it sends again).
type rttProxy struct {
	addr string
	mu   sync.Mutex
	log  [][][]string // each round trip's commands, each its arguments
}

// startRTTProxy forwards a loopback port to the Redis at target.
func startRTTProxy(t *testing.T, target string) *rttProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &rttProxy{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go p.relay(c, s)
		}
	}()
	return p
}

func (p *rttProxy) relay(client, server net.Conn) {
	var mu sync.Mutex
	var sent [][]string // the commands sent since the last reply
	var pending []byte  // a command not yet whole
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				mu.Lock()
				if sent != nil {
					p.mu.Lock()
					p.log = append(p.log, sent)
					p.mu.Unlock()
					sent = nil
				}
				mu.Unlock()
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				client.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			mu.Lock()
			pending = append(pending, buf[:n]...)
			for {
				cmd, rest, ok := respCommand(pending)
				if !ok {
					break
				}
				sent = append(sent, cmd)
				pending = rest
			}
			mu.Unlock()
			// Counted before it is forwarded: the reply cannot come first.
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			server.Close()
			return
		}
	}
}

// respCommand reads one command (an array of bulk strings) off b.
func respCommand(b []byte) (cmd []string, rest []byte, ok bool) {
	line := func(b []byte) (string, []byte, bool) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return "", nil, false
		}
		return string(b[:i]), b[i+2:], true
	}
	head, b, ok := line(b)
	if !ok || !strings.HasPrefix(head, "*") {
		return nil, nil, false
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil {
		return nil, nil, false
	}
	for i := range n {
		h, r, ok := line(b)
		if !ok || !strings.HasPrefix(h, "$") {
			return nil, nil, false
		}
		size, err := strconv.Atoi(h[1:])
		if err != nil || len(r) < size+2 {
			return nil, nil, false
		}
		arg := string(r[:size])
		if i == 0 {
			arg = strings.ToUpper(arg)
		}
		cmd = append(cmd, arg)
		b = r[size+2:]
	}
	return cmd, b, true
}

// take returns the round trips made for run since the last take: those
// with a command that names it (its lock, its ledger, its snapshot) or a
// hold (a reservation or settlement, whose keys are the holds'), but not
// a new connection's handshake nor the gateway's sweeps in the background
// (expired holds, the ended runs' index), which name no run's key but
// the ended runs'.
func (p *rttProxy) take(run string) [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]string
	for _, rt := range p.log {
		if slices.ContainsFunc(rt, func(c []string) bool { return callCommand(c, run) }) {
			out = append(out, shortened(rt))
		}
	}
	p.log = nil
	return out
}

func callCommand(c []string, run string) bool {
	if len(c) < 2 || strings.Contains(c[1], ":store:ended:") || strings.Contains(c[1], ":store:recording:") {
		return false
	}
	if (c[0] == "EVALSHA" || c[0] == "EVAL") && len(c) > 4 && c[2] != "1" && strings.HasSuffix(c[3], ":holds") {
		return true
	}
	return slices.ContainsFunc(c[1:], func(a string) bool { return strings.Contains(a, run) })
}

// shortened is a round trip's commands, each its name and first
// arguments, for the log.
func shortened(rt [][]string) []string {
	out := make([]string, len(rt))
	for i, c := range rt {
		var args []string
		for j, a := range c[:min(len(c), 4)] {
			if j == 0 && strings.HasPrefix(a, "EVAL") {
				a += "(" + c[1][:min(len(c[1]), 8)] + ")"
			}
			if len(a) > 28 {
				a = a[:28] + "…"
			}
			args = append(args, strings.Map(func(r rune) rune {
				if r < ' ' || r == 0xfffd {
					return '.'
				}
				return r
			}, a))
		}
		out[i] = strings.Join(args, " ")
	}
	return out
}

// quiet waits until no round trip was made for a while: what a call
// leaves behind it (a commit landing after its answer) is counted as its.
func (p *rttProxy) quiet() {
	last, still := -1, time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		n := len(p.log)
		p.mu.Unlock()
		if n != last {
			last, still = n, time.Now()
		} else if time.Since(still) > 300*time.Millisecond {
			return
		}
	}
}

// Two replicas on one Redis: a model call's round trips to Redis, counted
// on the wire, for a new run and a run's later steps (on the replica that
// moved it last, and on the other one), answered whole and streamed.
// On the replica that makes the run or moved it last, a call makes 2,
// neither taking the run's lock: Begin's reservation (with a new run's
// ledgers made ahead of it, and the budget header's headroom when
// streamed) with the run's write, applied only if the reservation was
// made and the stored run is the one this replica holds (none, for a new
// run); Finish's settlement (with the header's headroom) with the run's
// write, guarded so too. On the other replica the first write is refused
// and the call takes the lock: 5, the lock's round trip (with the run's
// snapshot, which brings the run into memory, and its ledger) releasing
// the refused reservation, then the reservation, Begin's commit (which
// lets go of the lock, landing while the provider answers) and Finish's
// guarded write. Each bound is what the call makes, so that one round
// trip more fails.
func TestRedisRoundTripsPerCall(t *testing.T) {
	t.Parallel()
	bin := buildGateway(t)
	rd := startRedis(t)
	px := startRTTProxy(t, "127.0.0.1:"+rd.port)
	m := &toolLoop{finalAfter: 100, in: 20, out: 5}
	up := newUpstream(t, m.serve)
	cfg := replicaConfig(t, "redis://"+px.addr+"/0", `{"haltline":{}}`)
	a := startReplica(t, bin, up.URL, cfg)
	b := startReplica(t, bin, up.URL, cfg)
	call := func(g *process, run string, step int, stream bool) int {
		t.Helper()
		body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","max_completion_tokens":50,"messages":[{"role":"user","content":"Read page %d."}]}`, step)
		if stream {
			body = bytes.Replace(body, []byte(`{"model"`), []byte(`{"stream":true,"model"`), 1)
		}
		px.quiet()
		px.take(run)
		st, _, out := post(t, "http://"+g.data+"/v1/chat/completions", body, map[string]string{"X-Run-Id": run})
		if st != 200 {
			t.Fatalf("%s step %d: %d %s", run, step, st, out)
		}
		px.quiet()
		trips := px.take(run)
		for i, rt := range trips {
			t.Logf("  %d: %s", i+1, strings.Join(rt, " | "))
		}
		return len(trips)
	}
	// The replicas load their scripts on first use: a call on each first,
	// not counted.
	call(a, "r-warm-a", 1, false)
	call(b, "r-warm-b", 1, false)
	for _, k := range []struct {
		name   string
		g      *process
		run    string
		step   int
		stream bool
		max    int
	}{
		{"new run", a, "r-one", 1, false, 2},
		{"later step", a, "r-one", 2, false, 2},
		{"later step, other replica", b, "r-one", 3, false, 5},
		{"later step, back again", a, "r-one", 4, false, 5},
		{"new run, streamed", a, "r-two", 1, true, 2},
		{"later step, streamed", a, "r-two", 2, true, 2},
		{"later step, streamed, other replica", b, "r-two", 3, true, 5},
	} {
		n := call(k.g, k.run, k.step, k.stream)
		t.Logf("%s: %d round trips", k.name, n)
		if n > k.max {
			t.Errorf("%s: %d round trips to Redis, want at most %d", k.name, n, k.max)
		}
	}
}
