package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// nginxInfo is the nginx binary measured as a reference.
type nginxInfo struct {
	path    string
	version string // "nginx/1.22.1"
	build   string // the output of nginx -V, to see which modules exist
}

// nginxFallback is where Debian's packages put nginx, outside most users'
// PATH.
const nginxFallback = "/usr/sbin/nginx"

var nginxVersion = regexp.MustCompile(`nginx/[0-9][0-9.]*[0-9]`)

// findNginx resolves -nginx. It returns nil and the reason when nginx is
// not to be measured; only an explicit path that does not work is an error,
// since auto mode must leave machines without nginx as they were.
func findNginx(flagValue string) (*nginxInfo, string, error) {
	auto := false
	var candidates []string
	switch flagValue {
	case "", "off":
		return nil, "not measured (-nginx off)", nil
	case "auto":
		auto = true
		if p, err := exec.LookPath("nginx"); err == nil {
			candidates = append(candidates, p)
		}
		candidates = append(candidates, nginxFallback)
	default:
		candidates = []string{flagValue}
	}
	var errs []error
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// -V prints the version and the configure arguments on stderr.
		out, err := exec.Command(p, "-V").CombinedOutput()
		m := nginxVersion.Find(out)
		if err != nil || m == nil {
			errs = append(errs, fmt.Errorf("%s -V: %v: %.200s", p, err, out))
			continue
		}
		return &nginxInfo{path: p, version: string(m), build: string(out)}, "", nil
	}
	if auto {
		return nil, "not measured (no nginx in PATH or at " + nginxFallback + ")", nil
	}
	return nil, "", fmt.Errorf("-nginx %s: %w", flagValue, errors.Join(errs...))
}

// atLeast reports whether the version is at least major.minor.patch.
func (n *nginxInfo) atLeast(want ...int) bool {
	parts := strings.Split(strings.TrimPrefix(n.version, "nginx/"), ".")
	for i, w := range want {
		v := 0
		if i < len(parts) {
			v, _ = strconv.Atoi(parts[i])
		}
		if v != w {
			return v > w
		}
	}
	return true
}

// hasModule reports whether an optional http module was built in: a
// *_temp_path directive of a missing module is a fatal config error.
func (n *nginxInfo) hasModule(name string) bool {
	return !strings.Contains(n.build, "--without-http_"+name+"_module")
}

// nginxConfig writes the reference configuration. Every choice either
// matches what the floor and the gateway do or keeps nginx from paying for
// something they do not:
//   - one process, no master: CPU time and VmHWM of one pid, as for the
//     others, and the same single core;
//   - request bodies read whole before forwarding (nginx's default, as the
//     floor and the gateway do) but kept in memory: the 200 KB phase must
//     not measure disk spooling;
//   - responses unbuffered, so streams pass chunk by chunk;
//   - keep-alive on both sides without a per-connection request cap, as Go's
//     servers and clients have none: nginx's default of 1,000 would make it
//     reconnect where the others do not;
//   - worker_connections above the load generator's peak, which its
//     preallocated connection table costs in RSS (about 0.5 KB each): in an
//     hour when a proxy stalls for seconds the open-loop load opens a
//     thousand connections a second, and a request takes two of nginx's
//     (4,096 ran out in a slow hour's 200 KB phase, nginx's p99 at 8 s,
//     and it closed connections in use).
func nginxConfig(n *nginxInfo, dir, listen, upstream string) (string, error) {
	tmp := filepath.Join(dir, "nginx-tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "daemon off;\nmaster_process off;\nworker_processes 1;\n")
	// As root, nginx chowns its temp dirs to "nobody", which need not
	// exist; naming the current user keeps everything as it is. The
	// directive is only legal for root: others would get a warning.
	if os.Geteuid() == 0 {
		if u, err := user.Current(); err == nil {
			line := "user " + u.Username
			if g, err := user.LookupGroupId(u.Gid); err == nil {
				line += " " + g.Name
			}
			fmt.Fprintf(&b, "%s;\n", line)
		}
	}
	fmt.Fprintf(&b, "pid %s;\nlock_file %s;\nerror_log %s warn;\n",
		filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "nginx.lock"), filepath.Join(dir, "nginx.log"))
	fmt.Fprintf(&b, "events {\n\tworker_connections 16384;\n}\n")
	fmt.Fprintf(&b, "http {\n\taccess_log off;\n")
	fmt.Fprintf(&b, "\tclient_body_temp_path %s;\n\tproxy_temp_path %s;\n", filepath.Join(tmp, "body"), filepath.Join(tmp, "proxy"))
	for _, m := range []string{"fastcgi", "uwsgi", "scgi"} {
		if n.hasModule(m) {
			fmt.Fprintf(&b, "\t%s_temp_path %s;\n", m, filepath.Join(tmp, m))
		}
	}
	fmt.Fprintf(&b, "\tclient_max_body_size 8m;\n\tclient_body_buffer_size 256k;\n")
	fmt.Fprintf(&b, "\tkeepalive_requests 1000000;\n\tkeepalive_timeout 75s;\n")
	fmt.Fprintf(&b, "\tupstream mock {\n\t\tserver %s;\n\t\tkeepalive 256;\n", upstream)
	if n.atLeast(1, 15, 3) { // upstream keepalive_requests appeared in 1.15.3
		fmt.Fprintf(&b, "\t\tkeepalive_requests 1000000;\n")
	}
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "\tserver {\n\t\tlisten %s;\n\t\tlocation / {\n", listen)
	fmt.Fprintf(&b, "\t\t\tproxy_pass http://mock;\n\t\t\tproxy_http_version 1.1;\n\t\t\tproxy_set_header Connection \"\";\n\t\t\tproxy_buffering off;\n")
	fmt.Fprintf(&b, "\t\t}\n\t}\n}\n")
	conf := filepath.Join(dir, "nginx.conf")
	return conf, os.WriteFile(conf, []byte(b.String()), 0o644)
}

// startNginx starts nginx in front of the mock, on the servers' CPU, and
// waits until it accepts connections.
func startNginx(ctx context.Context, pl *placement, dir string, n *nginxInfo, mockAddr string) (*proc, error) {
	logPath := filepath.Join(dir, "nginx.log")
	return startListening(ctx, pl, func(listen string) (*proc, *os.File, error) {
		conf, err := nginxConfig(n, dir, listen, mockAddr)
		if err != nil {
			return nil, nil, err
		}
		args := []string{"-p", dir + "/", "-c", conf}
		// Without -e (1.19.5), nginx first opens its built-in error log,
		// which may lie outside the round's directory.
		if n.atLeast(1, 19, 5) {
			args = append(args, "-e", logPath)
		}
		cmd := exec.Command(n.path, args...)
		s := &proc{name: "nginx", cmd: cmd, addr: listen, log: logPath, done: make(chan struct{})}
		// nginx appends its error log to the same file: both must append.
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		return s, logf, err
	}, func(s *proc) error { return waitAccept(ctx, s) })
}

// waitAccept waits until the process accepts TCP connections on its address.
// nginx retries a busy port for 2.5 s before it gives up, hence the bound.
func waitAccept(ctx context.Context, s *proc) error {
	return waitUntil(ctx, s, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
}

// nginxErrorLines counts the error-level lines of an nginx error log.
func nginxErrorLines(b []byte) int {
	n := 0
	for _, level := range []string{"[error]", "[crit]", "[alert]", "[emerg]"} {
		n += bytes.Count(b, []byte(level))
	}
	return n
}
