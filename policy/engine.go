package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Options configures an Engine.
type Options struct {
	// Dir is a policy directory (*.rego and data.json) merged over the
	// embedded defaults; empty means the embedded defaults alone.
	Dir string
	// Data is merged under data.haltline before the directory's data.json,
	// e.g. the tool registry from the config:
	// {"tools": {"fs": {"read_file": {"level": "L0"}}, "": {"search": {"level": "L0"}}}}.
	// It must marshal to a JSON object.
	Data map[string]any
	// Logger receives reload outcomes; nil discards them.
	Logger *slog.Logger
	// DecisionLog, when set, is called synchronously after every decision;
	// it must be quick and must not block.
	DecisionLog func(Decision)
	// DecisionSummaries renders each decision's Summary for DecisionLog
	// (the debug log line); off, a decision carries its Verdict only.
	DecisionSummaries bool
	// MemoBytes bounds the memoised answers of a compiled set, in bytes
	// as estimated per entry (memo.go); 0 takes DefaultMemoBytes, and a
	// negative value turns memoisation off.
	MemoBytes int64
}

// Engine answers the policy questions. It is safe for concurrent use; the
// evaluation path takes no lock, it reads one immutable compiled set.
type Engine struct {
	opts  Options
	data  map[string]any // opts.Data, normalised through JSON
	log   *slog.Logger
	cur   atomic.Pointer[set]
	errp  atomic.Pointer[error]
	mu    sync.Mutex // serialises Reload
	watch watchState // guarded by mu
}

// New loads, compiles and smoke-evaluates the merged policy set. It fails
// when any file does not parse or compile, or a question cannot be answered
// with an empty input.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{opts: opts, log: opts.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if opts.Data != nil {
		d, err := normaliseData(opts.Data)
		if err != nil {
			return nil, err
		}
		e.data = d
	}
	s, err := e.build(ctx, 1)
	if err != nil {
		return nil, err
	}
	e.cur.Store(s)
	e.watch.sum, _ = dirSum(opts.Dir)
	return e, nil
}

// normaliseData turns the caller's values (structs, typed maps) into plain
// JSON values so merging and OPA see one shape.
func normaliseData(d map[string]any) (map[string]any, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("policy: options data: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("policy: options data: %w", err)
	}
	return out, nil
}

func (e *Engine) build(ctx context.Context, version uint64) (*set, error) {
	srcs, data, err := loadAll(e.opts.Dir, e.data)
	if err != nil {
		return nil, err
	}
	if err := checkCollisions(srcs, data); err != nil {
		return nil, err
	}
	c, err := compile(modulesOf(srcs, false))
	if err != nil {
		return nil, err
	}
	memoBytes := e.opts.MemoBytes
	if memoBytes == 0 {
		memoBytes = DefaultMemoBytes
	}
	return newSet(ctx, srcs, data, c, version, memoBytes)
}

// Version is the version of the set in force; it starts at 1 and bumps on
// each successful reload.
func (e *Engine) Version() uint64 { return e.cur.Load().version }

// LastError is the error of the last reload, nil once one succeeds.
func (e *Engine) LastError() error {
	if p := e.errp.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload re-reads Dir and swaps the new set in. On error the last good set
// stays in force and the error (naming file and line) is returned and kept
// for LastError. Runs that already started keep the answers they got.
func (e *Engine) Reload(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reloadLocked(ctx)
}

func (e *Engine) reloadLocked(ctx context.Context) error {
	old := e.cur.Load()
	// Remember what was read so Watch does not reload the same content.
	if sum, err := dirSum(e.opts.Dir); err == nil {
		e.watch.sum = sum
	}
	s, err := e.build(ctx, old.version+1)
	if err != nil {
		e.errp.Store(&err)
		return err
	}
	e.cur.Store(s)
	e.errp.Store(nil)
	e.log.Info("policy reloaded", slog.Uint64("version", s.version), slog.Int("files", len(s.sources)))
	return nil
}

// TeamWindows returns the org-wide windows of a team from
// data.haltline.teams.<team>, sorted by name; nil when it has none.
func (e *Engine) TeamWindows(team string) []TeamWindow {
	ws := e.cur.Load().teams[team]
	if len(ws) == 0 {
		return nil
	}
	return cloneWindows(ws)
}
