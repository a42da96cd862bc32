package policy

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// writeDir writes files into a fresh temp dir and returns it.
func writeDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		writeFile(t, dir, name, body)
	}
	return dir
}

func writeFile(t testing.TB, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// defaultEngine is shared by read-only tests: compiling OPA is the slow part.
var defaultEngine = sync.OnceValue(func() *Engine {
	e, err := New(context.Background(), Options{})
	if err != nil {
		panic(err)
	}
	return e
})
