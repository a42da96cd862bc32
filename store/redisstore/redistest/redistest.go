// Package redistest runs the redis-server that the tests of the Redis
// store and of the Redis book share, and gives each test a key space of
// its own on it. It is for tests only.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Main runs a test binary's tests against REDIS_URL when set (CI), or
// else against a redis-server it starts for them; *url is set to the
// server's before the tests run. It does not return.
func Main(m *testing.M, url *string) {
	// go-redis logs every failed dial; outage tests cause many on purpose.
	redis.SetLogger(quietLogger{})
	if *url = os.Getenv("REDIS_URL"); *url != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "redis-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := Start(dir, FreePort(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "these tests need a Redis: set REDIS_URL or install redis-server:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	*url = srv.URL()
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Server is a redis-server subprocess on 127.0.0.1.
type Server struct {
	Cmd  *exec.Cmd
	Port int
	dir  string
	aof  bool
}

// URL is the server's redis:// address.
func (s *Server) URL() string { return "redis://127.0.0.1:" + strconv.Itoa(s.Port) + "/0" }

// Start runs redis-server on port with its files in dir. With aof, every
// write is fsynced to an append-only file before it is acknowledged, so
// that the data survives a SIGKILL (the outage tests); without, nothing
// is written to disk.
func Start(dir string, port int, aof bool) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", ""}
	if aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)))
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Cmd: cmd, Port: port, dir: dir, aof: aof}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the server as a crash would (SIGKILL).
func (s *Server) Kill() {
	_ = s.Cmd.Process.Kill()
	_ = s.Cmd.Wait()
}

// Stop ends the server (SIGINT, SIGKILL past 5 s).
func (s *Server) Stop() {
	_ = s.Cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.Kill()
	}
}

// Restart starts a new server on the same port and directory.
func (s *Server) Restart() error {
	n, err := Start(s.dir, s.Port, s.aof)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

// FreePort asks the kernel for a port nobody listens on. redis-server
// cannot listen on port 0 and report it, so the port is picked here.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var prefixSeq atomic.Int64

// Prefix gives each test its own key space on a shared server.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("test:%d:%d:%s:", os.Getpid(), prefixSeq.Add(1), name)
}

// Drop deletes a test's keys, so that a shared server (REDIS_URL) does
// not collect them run after run.
func Drop(url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	glob := strings.NewReplacer("*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(prefix) + "*"
	iter := c.Scan(ctx, 0, glob, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		c.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}
