package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/haltline/haltline/accounting"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/policy"
)

// exportRecordings is `gateway runs export`: the control plane's
// recordings, streamed as JSON Lines to a file or stdout.
func exportRecordings(ctx context.Context, c adminClient, since time.Duration, out string, stdout io.Writer) error {
	q := url.Values{}
	if since > 0 {
		q.Set("since", time.Now().Add(-since).UTC().Format(time.RFC3339))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/recordings?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return fmt.Errorf("GET /api/v1/recordings: %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	w := stdout
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	n, err := io.Copy(w, resp.Body) // streamed: an export may be large
	if err != nil {
		return err
	}
	if out != "" {
		if err := w.(*os.File).Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d bytes to %s\n", n, out)
	}
	return nil
}

// readRecordings reads JSON Lines files of recordings ("-" is stdin).
func readRecordings(paths []string, stdin io.Reader) ([]pipeline.Recording, error) {
	var recs []pipeline.Recording
	for _, path := range paths {
		var r io.Reader = stdin
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			r = f
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 1<<20), 256<<20) // one run per line, content may be large
		line := 0
		for sc.Scan() {
			line++
			b := sc.Bytes()
			if len(strings.TrimSpace(string(b))) == 0 {
				continue
			}
			var rec pipeline.Recording
			if err := json.Unmarshal(b, &rec); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			recs = append(recs, rec)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return recs, nil
}

// replayCommand is `gateway replay`: recorded runs through a candidate
// policy directory, offline.
func replayCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "[--policy-dir DIR] [--prices FILE] [--json] RECORDINGS…\n\n"+
		"Where recorded runs (gateway runs export; - for stdin) would end under DIR's policy, offline.")
	dir := fs.String("policy-dir", "", "candidate policy directory (*.rego, data.json); empty means the embedded defaults")
	prices := fs.String("prices", "", "price catalog file (default: the embedded one)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	files, help, err := parseFlags(fs, args, stdout, stderr)
	if help || err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErrorf(fs, stderr, "replay: no recordings named")
	}
	pol, err := policy.New(ctx, policy.Options{Dir: *dir})
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	cat := accounting.DefaultCatalog()
	if *prices != "" {
		if cat, err = accounting.LoadCatalog(*prices); err != nil {
			return fmt.Errorf("prices: %w", err)
		}
	}
	recs, err := readRecordings(files, os.Stdin)
	if err != nil {
		return err
	}
	rep, err := pipeline.Replay(ctx, pipeline.ReplayOptions{Policy: pol, Catalog: cat}, recs)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printReplay(stdout, rep)
}

// printReplay renders a replay report: one line per run, then the totals.
func printReplay(w io.Writer, rep *pipeline.ReplayReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tRECORDED\tREPLAYED\tCHANGED\tRECORDED USD\tREPLAYED USD\tSAVED USD")
	end := func(o pipeline.ReplayOutcome) string {
		return fmt.Sprintf("%s@%d", dash(o.Reason), o.Step)
	}
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\n", r.RunID, r.Error)
			continue
		}
		replayed := end(r.Replayed)
		if r.BeyondRecording {
			replayed = fmt.Sprintf("continues past %d", r.Replayed.Step)
		}
		changed := "-"
		if r.Changed {
			changed = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.6f\t%.6f\t%+.6f\n", r.RunID, end(r.Recorded), replayed, changed,
			r.Recorded.CostUSD, r.Replayed.CostUSD, r.SavedUSD)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := rep.Total
	_, err := fmt.Fprintf(w, "%d run(s): %d changed (%d ended earlier, %d later, %d past the recording), %d error(s); spend %.6f → %.6f USD, saved %+.6f USD\n",
		t.Runs, t.Changed, t.EndedEarlier, t.EndedLater, t.BeyondRecording, t.Errors, t.RecordedCostUSD, t.ReplayedCostUSD, t.SavedUSD)
	return err
}
