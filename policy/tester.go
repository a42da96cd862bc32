package policy

import (
	"context"
	"fmt"
	"io"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// RunTests runs the Rego unit tests of the merged set: the embedded
// defaults' *_test.rego, minus those of packages dir replaces, plus dir's
// own, against dir's data merged over the embedded data. It writes OPA's
// report to w and is what `gateway policy test [DIR]` runs. err is set when
// the set does not load; failing tests only count in failed.
func RunTests(ctx context.Context, dir string, w io.Writer, verbose bool) (passed, failed int, err error) {
	srcs, data, err := loadAll(dir, nil)
	if err != nil {
		return 0, 0, err
	}
	store := inmem.NewFromObjectWithOpts(data)
	ch, err := tester.NewRunner().
		SetCompiler(newCompiler()).
		SetDefaultRegoVersion(ast.RegoV1).
		// Tests run one at a time: the gateway host is shared, and the
		// whole suite takes milliseconds.
		SetParallel(1).
		SetStore(store).
		SetModules(modulesOf(srcs, true)).
		RunTests(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("policy: run tests: %w", err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
		switch {
		case r.Skip:
		case r.Fail || r.Error != nil:
			failed++
		default:
			passed++
		}
	}
	report := make(chan *tester.Result, len(results))
	for _, r := range results {
		report <- r
	}
	close(report)
	if w == nil {
		w = io.Discard
	}
	if err := (tester.PrettyReporter{Output: w, Verbose: verbose, FailureLine: true}).Report(report); err != nil {
		return passed, failed, err
	}
	return passed, failed, nil
}
