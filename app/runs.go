package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const runsUsage = `Usage: gateway runs VERB [flags] [RUN_ID]

  list      the runs, newest first
  show      a run's record (with its resume token when it can be resumed)
  events    a run's timeline
  cancel    end a live run
  resume    give a stopped run more budget
  export    recorded runs as JSON Lines, for gateway replay

gateway runs VERB -h shows the verb's flags.
`

// runsVerbs are the verbs of gateway runs: the synopsis and the flags each
// takes beyond --admin (and --json, unless noJSON).
var runsVerbs = map[string]struct {
	synopsis string
	flags    []string
	noJSON   bool
}{
	"list":   {"[--status S] [--reason R] [--tenant T] [--since DUR] [--limit N] [--json]", []string{"status", "reason", "tenant", "since", "limit"}, false},
	"show":   {"[--tenant T] [--json] RUN_ID", []string{"tenant"}, false},
	"events": {"[--tenant T] [--json] RUN_ID", []string{"tenant"}, false},
	"cancel": {"[--tenant T] [--json] RUN_ID", []string{"tenant"}, false},
	"resume": {"[--tenant T] --add-budget BUDGET [--resume-token TOKEN] [--json] RUN_ID", []string{"tenant", "add-budget", "resume-token"}, false},
	"export": {"[--since DUR] [--out FILE]", []string{"since", "out"}, true},
}

// runsCommand is `gateway runs list|show|events|cancel|resume|export`
// against the control plane.
func runsCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, runsUsage)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, runsUsage)
		return UsageError{errors.New("runs: no verb")}
	}
	verb := args[0]
	spec, ok := runsVerbs[verb]
	if !ok {
		fmt.Fprint(stderr, runsUsage)
		return UsageError{fmt.Errorf("unknown runs command %q", verb)}
	}
	all := flag.NewFlagSet("", flag.ContinueOnError)
	adminURL := all.String("admin", "http://127.0.0.1:9090", "control plane URL (token: HALTLINE_ADMIN_TOKEN)")
	asJSON := all.Bool("json", false, "print the control plane's JSON, for scripts")
	status := all.String("status", "", "only runs in this status")
	reason := all.String("reason", "", "only runs ended for this termination reason")
	tenant := all.String("tenant", "", "the run's tenant, needed where runs of several tenants share the id")
	since := all.Duration("since", 0, "only runs created within this duration, e.g. 1h")
	limit := all.Int("limit", 0, "at most this many runs, newest first")
	addBudget := all.String("add-budget", "", "budget to add, X-Run-Budget keys (e.g. max_steps=5)")
	token := all.String("resume-token", "", "the record's resume token")
	out := all.String("out", "", "write the recordings to this file (JSON Lines) instead of stdout")
	// The verb's flag set holds only its own flags, so that its usage does.
	fs := newFlags("runs "+verb, spec.synopsis)
	own := append([]string{"admin"}, spec.flags...)
	if !spec.noJSON {
		own = append(own, "json")
	}
	for _, name := range own {
		f := all.Lookup(name)
		usage := f.Usage
		if name == "tenant" && verb == "list" {
			usage = "only the runs of this tenant"
		}
		fs.Var(f.Value, f.Name, usage)
	}
	ops, help, err := parseFlags(fs, args[1:], stdout, stderr)
	if help || err != nil {
		return err
	}
	id := ""
	switch {
	case verb == "list" || verb == "export":
		if len(ops) > 0 {
			return usageErrorf(fs, stderr, "runs %s: unexpected %q", verb, ops[0])
		}
	case len(ops) != 1:
		return usageErrorf(fs, stderr, "runs %s: want one RUN_ID", verb)
	default:
		id = ops[0]
	}
	c := adminClient{base: strings.TrimRight(*adminURL, "/"), token: getenv("HALTLINE_ADMIN_TOKEN")}
	// runPath is the run's route, within its tenant when one is named.
	runPath := func(suffix string) string {
		p := "/api/v1/runs/" + url.PathEscape(id) + suffix
		if *tenant != "" {
			p += "?tenant=" + url.QueryEscape(*tenant)
		}
		return p
	}
	var body []byte
	switch verb {
	case "export": // recordings for replay (replay.go)
		return exportRecordings(ctx, c, *since, *out, stdout)
	case "list":
		q := url.Values{}
		for k, v := range map[string]string{"status": *status, "reason": *reason, "tenant": *tenant} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if *since > 0 {
			q.Set("since", time.Now().Add(-*since).UTC().Format(time.RFC3339))
		}
		if *limit > 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		body, err = c.do(ctx, "GET", "/api/v1/runs?"+q.Encode(), nil)
		if err == nil && !*asJSON {
			return printRunList(stdout, body)
		}
	case "show", "cancel":
		method, suffix := "GET", ""
		if verb == "cancel" {
			method, suffix = "POST", "/cancel"
		}
		body, err = c.do(ctx, method, runPath(suffix), nil)
		if err == nil && !*asJSON {
			return printRecord(stdout, body)
		}
	case "events":
		body, err = c.do(ctx, "GET", runPath("/events"), nil)
		if err == nil && !*asJSON {
			return printEvents(stdout, body)
		}
	case "resume":
		req, _ := json.Marshal(map[string]string{"add_budget": *addBudget, "resume_token": *token})
		body, err = c.do(ctx, "POST", runPath("/resume"), req)
		if err == nil && !*asJSON {
			return printRecord(stdout, body)
		}
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(body)
	return err
}

type adminClient struct{ base, token string }

func (c adminClient) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return b, nil
}

type listedRun struct {
	RunID      string  `json:"run_id"`
	Tenant     string  `json:"tenant"`
	Team       string  `json:"team"`
	Status     string  `json:"status"`
	Reason     string  `json:"reason"`
	AgentSteps int64   `json:"agent_steps"`
	Tokens     int64   `json:"total_tokens"`
	Cost       float64 `json:"actual_cost_usd"`
	ElapsedMs  int64   `json:"elapsed_ms"`
	Created    string  `json:"created"`
}

func printRunList(w io.Writer, body []byte) error {
	var l struct {
		Runs []listedRun `json:"runs"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tTENANT\tTEAM\tSTATUS\tREASON\tSTEPS\tTOKENS\tCOST USD\tELAPSED\tSTARTED")
	for _, r := range l.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.6f\t%s\t%s\n", r.RunID, dash(r.Tenant), dash(r.Team), r.Status,
			dash(r.Reason), r.AgentSteps, r.Tokens, r.Cost, time.Duration(r.ElapsedMs)*time.Millisecond, shortTime(r.Created))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d run(s)\n", len(l.Runs))
	return err
}

// dash keeps empty table cells visible.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortTime renders an RFC 3339 time to the second, in UTC.
func shortTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func printRecord(w io.Writer, body []byte) error {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return err
	}
	order := []string{"run_id", "session_id", "tenant", "team", "status", "reason", "detail", "detector",
		"agent_steps", "max_steps", "model_calls", "tool_calls", "input_tokens", "output_tokens",
		"total_tokens", "actual_cost_usd", "estimated_cost_usd", "elapsed_ms", "deadline_ms", "last_action", "recoverable",
		"partial_result_available", "resume_token", "would_terminate"}
	// The record's estimated_cost_usd is the sum of the calls' worst cases
	// reserved before they went out, not a forecast: it is named so here.
	label := map[string]string{"estimated_cost_usd": "reserved_worst_case_usd"}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range order {
		v, ok := m[k]
		if !ok || v == nil || v == "" {
			continue
		}
		if b, err := json.Marshal(v); err == nil && (strings.HasPrefix(string(b), "{") || strings.HasPrefix(string(b), "[")) {
			v = string(b)
		}
		name := k
		if l, ok := label[k]; ok {
			name = l
		}
		fmt.Fprintf(tw, "%s\t%v\n", name, v)
	}
	return tw.Flush()
}

func printEvents(w io.Writer, body []byte) error {
	var l struct {
		Events []struct {
			Seq       int64   `json:"seq"`
			ElapsedMs int64   `json:"elapsed_ms"`
			Type      string  `json:"type"`
			From      string  `json:"from"`
			To        string  `json:"to"`
			Step      int64   `json:"step"`
			Detail    string  `json:"detail"`
			Tool      string  `json:"tool"`
			ArgsHash  string  `json:"arguments_hash"`
			Model     string  `json:"model"`
			Status    int     `json:"status"`
			In        int64   `json:"input_tokens"`
			Out       int64   `json:"output_tokens"`
			Cost      float64 `json:"cost_usd"`
		} `json:"events"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tT+MS\tSTEP\tEVENT\tDETAIL")
	for _, e := range l.Events {
		d := e.Detail
		switch e.Type {
		case "transition":
			d = strings.TrimSpace(fmt.Sprintf("%s → %s %s", e.From, e.To, e.Detail))
		case "model_call":
			d = strings.TrimSpace(fmt.Sprintf("%s %d in=%d out=%d cost=$%.6f %s", e.Model, e.Status, e.In, e.Out, e.Cost, e.Detail))
		case "tool_call":
			d = e.Tool + " args=" + dash(e.ArgsHash)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", e.Seq, e.ElapsedMs, e.Step, e.Type, d)
	}
	return tw.Flush()
}
