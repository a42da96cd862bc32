package app

import (
	"flag"
	"fmt"
	"io"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/store"
)

const storeUsage = `Usage:
  gateway store check  [--config FILE] [--data-dir DIR]
        read the embedded store (log segments, bbolt meta pages, every page
        of the bbolt file) and describe it; exit 0 when it opens as it is
  gateway store repair [--config FILE] [--data-dir DIR]
        keep what is whole: a damaged log segment is cut before its damage
        and newer segments are set aside (each kept as NAME.damaged-TIME),
        a damaged bbolt meta page is rewritten from the other; says what
        it dropped

The gateway must not be running on the directory. DIR defaults to the
configuration's store.data_dir (` + "`./haltline-data`" + ` without one).
`

// storeCommand is `gateway store check|repair`: the embedded store's
// damage, described and repaired offline.
func storeCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(stdout, storeUsage)
		return nil
	}
	verb := args[0]
	fs := flag.NewFlagSet("store "+verb, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), storeUsage) }
	if verb != "check" && verb != "repair" {
		return usageErrorf(fs, stderr, "unknown store command %q", verb)
	}
	file := fs.String("config", "", "YAML configuration file (its store.data_dir)")
	dataDir := fs.String("data-dir", "", "embedded store directory")
	ops, help, err := parseFlags(fs, args[1:], stdout, stderr)
	if help || err != nil {
		return err
	}
	if len(ops) > 0 {
		return usageErrorf(fs, stderr, "gateway store %s: unexpected %q", verb, ops[0])
	}
	cfg := config.Default()
	if *file != "" {
		if err := cfg.Load(*file); err != nil {
			return err
		}
	}
	dir := cfg.Store.DataDir
	if *dataDir != "" {
		dir = *dataDir
	}
	if verb == "repair" {
		done, err := store.Repair(dir)
		if done != nil {
			for _, a := range done.Actions {
				fmt.Fprintln(stdout, "repaired:", a)
			}
		}
		if err != nil {
			return fmt.Errorf("repair %s: %w", dir, err)
		}
		if len(done.Actions) == 0 {
			fmt.Fprintf(stdout, "%s: nothing to repair\n", dir)
		}
	}
	rep, err := store.Check(dir)
	if err != nil {
		return fmt.Errorf("check %s: %w", dir, err)
	}
	rep.Write(stdout)
	if !rep.Whole() {
		return fmt.Errorf("the store in %s is damaged: it will not open; `gateway store repair --data-dir %s` keeps what is whole", dir, dir)
	}
	fmt.Fprintf(stdout, "%s: the store opens\n", dir)
	return nil
}
