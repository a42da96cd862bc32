package policy

import (
	"context"
	"strings"
	"testing"
)

// TestEmbeddedRegoTests runs the *_test.rego files of package rego, so a
// change to a default policy that breaks its own tests fails go test.
func TestEmbeddedRegoTests(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	passed, failed, err := RunTests(context.Background(), "", &out, true)
	if err != nil {
		t.Fatalf("RunTests: %v", err)
	}
	if failed > 0 || passed == 0 {
		t.Fatalf("passed=%d failed=%d\n%s", passed, failed, out.String())
	}
	t.Logf("%d Rego tests passed", passed)
}

func TestRunTestsWithDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc       string
		files      map[string]string
		wantFailed int
		wantErr    string
	}{
		{
			desc: "dir test over merged data",
			files: map[string]string{
				"data.json": `{"haltline": {"budgets": {"teams": {"red": {"max_steps": 7}}}}}`,
				"red_test.rego": `package haltline.red_test
import data.haltline.budget
test_red_steps if budget.limits.max_steps == 7 with input as {"principal": {"team": "red"}}`,
			},
		},
		{
			desc: "overridden package drops the embedded tests of it",
			files: map[string]string{
				"budget.rego": `package haltline.budget
limits := {"max_steps": 5}`,
			},
		},
		{
			desc: "failing dir test counts",
			files: map[string]string{
				"x_test.rego": `package haltline.x_test
test_fails if 1 == 2`,
			},
			wantFailed: 1,
		},
		{
			desc:    "broken dir file is an error naming it",
			files:   map[string]string{"bad.rego": "package haltline.model\ndeny contains x if {"},
			wantErr: "bad.rego:2",
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			dir := writeDir(t, tc.files)
			var out strings.Builder
			_, failed, err := RunTests(context.Background(), dir, &out, false)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if failed != tc.wantFailed {
				t.Fatalf("failed = %d, want %d\n%s", failed, tc.wantFailed, out.String())
			}
		})
	}
}
