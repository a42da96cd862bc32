package policy

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// watchState is what Watch last saw of the directory.
type watchState struct {
	sum [sha256.Size]byte
}

// Watch polls Dir every interval and reloads when the content of its
// *.rego files or data.json changed. A bad file is logged once per change,
// naming file and line, and the last good set stays in force. It returns
// when ctx is done, or at once when Dir is empty. Polling (rather than
// inotify) also sees the symlink swaps of a Kubernetes ConfigMap mount.
func (e *Engine) Watch(ctx context.Context, every time.Duration) {
	if e.opts.Dir == "" {
		return
	}
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.poll(ctx)
		}
	}
}

func (e *Engine) poll(ctx context.Context) {
	sum, err := dirSum(e.opts.Dir)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		if e.watch.sum != [sha256.Size]byte{} {
			e.log.Error("policy dir unreadable; keeping the policies in force", slog.String("dir", e.opts.Dir), slog.Any("error", err))
			e.watch.sum = [sha256.Size]byte{}
		}
		return
	}
	if sum == e.watch.sum {
		return
	}
	if err := e.reloadLocked(ctx); err != nil {
		e.log.Error("policy reload failed; keeping the policies in force",
			slog.String("dir", e.opts.Dir), slog.Uint64("version", e.cur.Load().version), slog.Any("error", err))
	}
}

// dirSum hashes the names and contents of the files a reload reads. The
// files are small, so hashing beats trusting mtimes that may not move on a
// fast edit.
func dirSum(dir string) ([sha256.Size]byte, error) {
	var zero [sha256.Size]byte
	if dir == "" {
		return zero, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return zero, err
	}
	names := make([]string, 0, len(ents))
	for _, ent := range ents {
		n := ent.Name()
		if !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".rego") || n == dataFile) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			if st, serr := os.Stat(filepath.Join(dir, n)); serr == nil && st.IsDir() {
				continue
			}
			return zero, err
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out, nil
}
