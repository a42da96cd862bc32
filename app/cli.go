package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// UsageError is a command line the gateway cannot read: an unknown verb or
// flag, or a missing operand. The usage was printed; the exit status is 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// ExitCode is the process's exit status for Main's error: 0 for none, 2 for
// a command line it cannot read (as the flag package's own programs do),
// 1 for a command that failed.
func ExitCode(err error) int {
	var u UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		return 2
	}
	return 1
}

// newFlags is a verb's flag set; its usage is the verb's synopsis and its
// own flags, nothing of the other verbs'.
func newFlags(verb, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gateway %s %s\n", verb, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags reads args into fs, flags and operands in any order (after
// "--" everything is an operand), and returns the operands. -h or --help
// prints the usage on stdout and reports help; a flag it cannot read prints
// the usage on stderr and is a UsageError.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (operands []string, help bool, err error) {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	for {
		fs.Usage = func() {} // printed below, on the stream that fits
		err := fs.Parse(args)
		fs.Usage = usage
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			usage()
			return nil, true, nil
		}
		if err != nil {
			return nil, false, usageErrorf(fs, stderr, "%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return operands, false, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(operands, rest...), false, nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

// usageErrorf prints fs's usage on stderr and returns the UsageError.
func usageErrorf(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) error {
	fs.SetOutput(stderr)
	fs.Usage()
	return UsageError{fmt.Errorf(format, a...)}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// version is `gateway version`: the module version and the VCS revision
// the binary was built from.
func version(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		_, err := fmt.Fprintln(w, "gateway (no build information)")
		return err
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+modified"
			}
		}
	}
	line := "gateway " + v
	if rev != "" {
		line += " " + rev + dirty
		if at != "" {
			line += " " + at
		}
	}
	_, err := fmt.Fprintf(w, "%s %s\n", line, bi.GoVersion)
	return err
}
