package app

import (
	"bytes"
	"strings"
	"testing"
)

func cli(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Main(t.Context(), args, &out, &errOut, func(string) string { return "" })
	return out.String(), errOut.String(), err
}

// TestEveryVerbHelp walks every command and verb with -h and --help: each
// prints its own usage on stdout, with its own flags and none of another
// verb's, and exits 0 without doing anything.
func TestEveryVerbHelp(t *testing.T) {
	cases := []struct {
		args     []string
		has, not []string
	}{
		{[]string{"serve"}, []string{"gateway serve", "-listen", "-config"}, []string{"-add-budget"}},
		{[]string{"demo"}, []string{"gateway demo"}, []string{"-admin"}},
		{[]string{"runs"}, []string{"gateway runs VERB", "export"}, nil},
		{[]string{"runs", "list"}, []string{"gateway runs list", "-status", "-limit", "-admin", "-json"}, []string{"-add-budget", "-resume-token", "-out"}},
		{[]string{"runs", "show"}, []string{"gateway runs show", "-tenant", "RUN_ID"}, []string{"-status", "-add-budget", "-limit"}},
		{[]string{"runs", "events"}, []string{"gateway runs events", "-tenant"}, []string{"-status", "-add-budget"}},
		{[]string{"runs", "cancel"}, []string{"gateway runs cancel", "-tenant"}, []string{"-status", "-add-budget"}},
		{[]string{"runs", "resume"}, []string{"gateway runs resume", "-add-budget", "-resume-token"}, []string{"-status", "-out"}},
		{[]string{"runs", "export"}, []string{"gateway runs export", "-since", "-out"}, []string{"-json", "-status", "-add-budget"}},
		{[]string{"replay"}, []string{"gateway replay", "-policy-dir", "-prices"}, []string{"-admin"}},
		{[]string{"policy"}, []string{"gateway policy test"}, []string{"-admin"}},
		{[]string{"policy", "test"}, []string{"gateway policy test"}, []string{"-admin"}},
		{[]string{"store"}, []string{"gateway store check", "gateway store repair"}, []string{"-admin"}},
		{[]string{"store", "check"}, []string{"gateway store check", "--data-dir"}, []string{"-admin"}},
		{[]string{"store", "repair"}, []string{"gateway store repair"}, []string{"-admin"}},
		{[]string{"version"}, []string{"gateway version"}, []string{"-admin"}},
	}
	for _, c := range cases {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, c.args...), h)
			out, errOut, err := cli(t, args...)
			if err != nil || ExitCode(err) != 0 {
				t.Errorf("%v: %v (exit %d)\n%s", args, err, ExitCode(err), errOut)
				continue
			}
			for _, s := range c.has {
				if !strings.Contains(out, s) {
					t.Errorf("%v: usage lacks %q:\n%s", args, s, out)
				}
			}
			for _, s := range c.not {
				if strings.Contains(out, s) {
					t.Errorf("%v: usage shows another verb's %q:\n%s", args, s, out)
				}
			}
		}
	}
	for _, h := range []string{"-h", "--help", "help"} {
		if out, _, err := cli(t, h); err != nil || !strings.Contains(out, "gateway runs") {
			t.Errorf("%s: %v\n%s", h, err, out)
		}
	}
}

// TestBadCommandLines: an unknown verb or flag, or a missing operand, is
// exit status 2 with the usage on stderr; stdout stays empty.
func TestBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"serv"},
		{"serve", "--bogus"},
		{"serve", "extra"},
		{"demo", "--bogus"},
		{"runs"},
		{"runs", "lst"},
		{"runs", "list", "--add-budget", "x"},
		{"runs", "show"},
		{"runs", "show", "a", "b"},
		{"replay"},
		{"replay", "--bogus", "f.jsonl"},
		{"policy"},
		{"policy", "tset"},
		{"store", "mend"},
		{"store", "check", "--bogus"},
		{"version", "--bogus"},
	} {
		out, errOut, err := cli(t, args...)
		if ExitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, ExitCode(err), err)
		}
		if !strings.Contains(errOut, "Usage") || out != "" {
			t.Errorf("%v: want the usage on stderr alone; stdout %q, stderr %q", args, out, errOut)
		}
	}
}

// TestFlagsAfterOperands: flags may follow the run id, as people type them.
func TestFlagsAfterOperands(t *testing.T) {
	fs := newFlags("runs show", "RUN_ID")
	tenant := fs.String("tenant", "", "")
	var out, errOut bytes.Buffer
	ops, help, err := parseFlags(fs, []string{"run-1", "--tenant", "acme", "--", "-x"}, &out, &errOut)
	if err != nil || help || *tenant != "acme" || len(ops) != 2 || ops[0] != "run-1" || ops[1] != "-x" {
		t.Fatalf("operands %q, tenant %q, help %v, err %v", ops, *tenant, help, err)
	}
}

func TestVersion(t *testing.T) {
	out, _, err := cli(t, "version")
	if err != nil || !strings.HasPrefix(out, "gateway ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %v %q", err, out)
	}
}
