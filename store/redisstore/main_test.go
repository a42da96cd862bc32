package redisstore

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

// redisURL is the server every test shares: REDIS_URL when set (CI),
// otherwise a redis-server this package starts for itself.
var redisURL string

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage test causes many on purpose.
	redis.SetLogger(quietLogger{})
	var srv *redisServer
	if redisURL = os.Getenv("REDIS_URL"); redisURL == "" {
		dir, err := os.MkdirTemp("", "redisstore-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		srv, err = startRedis(dir, freePort(), false)
		if err != nil {
			fmt.Fprintln(os.Stderr, "redisstore tests need a Redis: set REDIS_URL or install redis-server:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		redisURL = srv.url()
		code := m.Run()
		srv.stop()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// redisServer is a redis-server subprocess on 127.0.0.1.
type redisServer struct {
	cmd  *exec.Cmd
	port int
	dir  string
	aof  bool
}

func (s *redisServer) url() string { return "redis://127.0.0.1:" + strconv.Itoa(s.port) + "/0" }

// startRedis runs redis-server on port with its files in dir. With aof,
// every write is fsynced to an append-only file before it is acknowledged,
// so that the data survives a SIGKILL (the outage test); without, nothing
// is written to disk.
func startRedis(dir string, port int, aof bool) (*redisServer, error) {
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
	s := &redisServer{cmd: cmd, port: port, dir: dir, aof: aof}
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
			s.stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the server as a crash would (SIGKILL).
func (s *redisServer) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func (s *redisServer) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.kill()
	}
}

// restart starts a new server on the same port and directory.
func (s *redisServer) restart() error {
	n, err := startRedis(s.dir, s.port, s.aof)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

// freePort asks the kernel for a port nobody listens on. redis-server
// cannot listen on port 0 and report it, so the port is picked here.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var prefixSeq atomic.Int64

// testPrefix gives each test its own key space on the shared server.
func testPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("test:%d:%d:%s:", os.Getpid(), prefixSeq.Add(1), name)
}

// openOne opens a Book and a Store on a fresh prefix, closed (and the
// prefix's keys dropped) when the test ends.
func openOne(t testing.TB) (*Book, *Store) {
	t.Helper()
	prefix := testPrefix(t)
	book, st, err := Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { book.Close(); st.Close(); dropPrefix(prefix) })
	return book, st
}

// openPair opens two Books (two "replicas": two clients) and one Store on
// the shared server under one fresh prefix, closed when the test ends.
func openPair(t testing.TB) (a, b *Book, s *Store) {
	t.Helper()
	prefix := testPrefix(t)
	a, s, err := Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	b, s2, err := Open(redisURL, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dropPrefix(prefix)
		a.Close()
		b.Close()
		s.Close()
		s2.Close()
	})
	return a, b, s
}

// dropPrefix deletes a test's keys, so that a shared server (REDIS_URL)
// does not collect them run after run.
func dropPrefix(prefix string) {
	opt, err := redis.ParseURL(redisURL)
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
