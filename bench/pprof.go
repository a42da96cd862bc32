package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// profiles takes the Haltline targets' CPU profiles (-pprof) while they
// are measured: where a profile of the harness's load shows each stage's
// share of the gateway's CPU, a benchmark in process shows it with warm
// caches and without the network. It reads the gateway's own
// /debug/pprof/profile (its control plane), in consecutive slices while a
// workload runs, each slice to a file of its own: a profile's length is
// fixed when it starts, and a streamed turn or a saturation search has no
// length known ahead. `go tool pprof` merges the files it is given.
type profiles struct {
	dir    string
	round  int
	client *http.Client
	next   map[string]int // the next file's number, by target and phase
}

// newProfiles returns nil when dir is empty: during then only runs the work.
func newProfiles(dir string, round int) *profiles {
	if dir == "" {
		return nil
	}
	return &profiles{dir: dir, round: round, client: &http.Client{}, next: map[string]int{}}
}

// during runs work while t's CPU is profiled in slices of slice (whole
// seconds, at least one; the endpoint counts in seconds), when t is a
// gateway. The last slice may end after the work: the wait is bounded by
// one slice.
func (p *profiles) during(ctx context.Context, t *target, phase string, slice time.Duration, work func() error) error {
	if p == nil || !t.gateway { // a gateway target always has its control plane (startGateway)
		return work()
	}
	seconds := max(1, int(math.Ceil(slice.Seconds())))
	stop := make(chan struct{})
	done := make(chan error, 1)
	key := t.name + "-" + phase
	go func() {
		for {
			p.next[key]++
			name := fmt.Sprintf("%s-r%d-%03d.pprof", key, p.round+1, p.next[key])
			if err := p.fetch(ctx, t.proxy.admin, fmt.Sprintf("profile?seconds=%d", seconds), seconds, filepath.Join(p.dir, name)); err != nil {
				done <- fmt.Errorf("%s: CPU profile: %w", t.name, err)
				return
			}
			// The heap as the slice ends: what the gateway holds under
			// this load, beside where its CPU went.
			heap := strings.TrimSuffix(name, ".pprof") + ".heap"
			if err := p.fetch(ctx, t.proxy.admin, "heap", 0, filepath.Join(p.dir, heap)); err != nil {
				done <- fmt.Errorf("%s: heap profile: %w", t.name, err)
				return
			}
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
		}
	}()
	err := work()
	close(stop)
	return errors.Join(err, <-done)
}

// fetch writes one profile, /debug/pprof/ENDPOINT, to path; seconds is
// how long the endpoint samples before it answers.
func (p *profiles) fetch(ctx context.Context, admin, endpoint string, seconds int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/%s", admin, endpoint), nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, msg)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
