package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const steps5 = "package haltline.budget\nlimits := {\"max_steps\": 5}\n"

func TestReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := writeDir(t, map[string]string{"budget.rego": steps5})
	e := newEngine(t, Options{Dir: dir})
	steps := func() int64 {
		t.Helper()
		l, err := e.Budget(ctx, RunInput{})
		if err != nil {
			t.Fatal(err)
		}
		return l.MaxSteps
	}
	if got := steps(); got != 5 || e.Version() != 1 {
		t.Fatalf("steps=%d version=%d", got, e.Version())
	}

	writeFile(t, dir, "budget.rego", "package haltline.budget\nlimits := {\"max_steps\": 6\n")
	err := e.Reload(ctx)
	if err == nil || !strings.Contains(err.Error(), "budget.rego:") {
		t.Fatalf("Reload of a broken file: err = %v, want the file named", err)
	}
	if e.LastError() == nil || e.Version() != 1 || steps() != 5 {
		t.Fatalf("the last good set must stay: version=%d steps=%d lastErr=%v", e.Version(), steps(), e.LastError())
	}

	writeFile(t, dir, "budget.rego", "package haltline.budget\nlimits := {\"max_steps\": 7}\n")
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if e.LastError() != nil || e.Version() != 2 || steps() != 7 {
		t.Fatalf("after fix: version=%d steps=%d lastErr=%v", e.Version(), steps(), e.LastError())
	}

	// Removing the file brings the embedded package back.
	if err := os.Remove(filepath.Join(dir, "budget.rego")); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := steps(); got != 100 {
		t.Fatalf("embedded default after removal: steps=%d", got)
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := writeDir(t, map[string]string{"budget.rego": steps5})
	e := newEngine(t, Options{Dir: dir})
	const every = 20 * time.Millisecond
	var wg sync.WaitGroup
	wg.Go(func() { e.Watch(ctx, every) })
	defer wg.Wait()
	defer cancel()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second) // generous: OPA compiles on a shared host
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(every / 2)
		}
	}
	steps := func() int64 {
		l, err := e.Budget(ctx, RunInput{})
		if err != nil {
			t.Error(err)
		}
		return l.MaxSteps
	}

	writeFile(t, dir, "budget.rego", "package haltline.budget\nlimits := {\"max_steps\": 8}\n")
	waitFor("the change", func() bool { return steps() == 8 })

	writeFile(t, dir, "budget.rego", "package haltline.budget\nlimits := {\n")
	waitFor("the bad file to be reported", func() bool { return e.LastError() != nil })
	if steps() != 8 {
		t.Fatal("a bad file must leave the last good set in force")
	}

	writeFile(t, dir, "data.json", `{"haltline": {"terminations": {"mode": "reject"}}}`)
	writeFile(t, dir, "budget.rego", steps5)
	waitFor("the fix", func() bool { return steps() == 5 && e.LastError() == nil })
	a, err := e.Termination(ctx, RunInput{})
	if err != nil || a.Mode != ModeReject {
		t.Fatalf("data change: %+v %v", a, err)
	}
}

// TestConcurrentReload asks questions while reloading: answers always come
// from one whole set (run with -race).
func TestConcurrentReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := writeDir(t, map[string]string{"budget.rego": steps5})
	e := newEngine(t, Options{Dir: dir})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := e.Budget(ctx, RunInput{})
				if err != nil || (l.MaxSteps != 5 && l.MaxSteps != 9) {
					t.Errorf("answer %d, %v", l.MaxSteps, err)
					return
				}
				if _, err := e.Tool(ctx, ToolInput{Tool: ToolInfo{Name: "x"}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 4 {
		body := steps5
		if i%2 == 0 {
			body = "package haltline.budget\nlimits := {\"max_steps\": 9}\n"
		}
		writeFile(t, dir, "budget.rego", body)
		if err := e.Reload(ctx); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if e.Version() != 5 {
		t.Fatalf("version = %d", e.Version())
	}
}
