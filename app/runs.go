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

// runsCommand is `gateway runs list|show|events|cancel|resume` against the
// control plane.
func runsCommand(ctx context.Context, args []string, stdout io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return errors.New("usage: gateway runs list|show|events|cancel|resume|export [--admin URL] [--json]")
	}
	verb := args[0]
	fs := flag.NewFlagSet("runs "+verb, flag.ContinueOnError)
	adminURL := fs.String("admin", "http://127.0.0.1:9090", "control plane URL")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	status := fs.String("status", "", "list: filter by status")
	reason := fs.String("reason", "", "list: filter by termination reason")
	tenant := fs.String("tenant", "", "list: filter by tenant; show, events, cancel, resume: the run's tenant, needed where runs of several tenants share the id")
	since := fs.Duration("since", 0, "list: runs created within this duration, e.g. 1h")
	limit := fs.Int("limit", 0, "list: at most this many runs, newest first")
	addBudget := fs.String("add-budget", "", "resume: budget to add, X-Run-Budget keys")
	token := fs.String("resume-token", "", "resume: the record's resume token")
	out := fs.String("out", "", "export: write the recordings to this file (JSON Lines) instead of stdout")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	c := adminClient{base: strings.TrimRight(*adminURL, "/"), token: getenv("HALTLINE_ADMIN_TOKEN")}
	id := fs.Arg(0)
	// runPath is the run's route, within its tenant when one is named.
	runPath := func(suffix string) string {
		p := "/api/v1/runs/" + url.PathEscape(id) + suffix
		if *tenant != "" {
			p += "?tenant=" + url.QueryEscape(*tenant)
		}
		return p
	}
	needID := func() error {
		if id == "" {
			return fmt.Errorf("usage: gateway runs %s RUN_ID", verb)
		}
		return nil
	}
	var (
		body []byte
		err  error
	)
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
	case "show":
		if err = needID(); err == nil {
			body, err = c.do(ctx, "GET", runPath(""), nil)
			if err == nil && !*asJSON {
				return printRecord(stdout, body)
			}
		}
	case "events":
		if err = needID(); err == nil {
			body, err = c.do(ctx, "GET", runPath("/events"), nil)
			if err == nil && !*asJSON {
				return printEvents(stdout, body)
			}
		}
	case "cancel":
		if err = needID(); err == nil {
			body, err = c.do(ctx, "POST", runPath("/cancel"), nil)
			if err == nil && !*asJSON {
				return printRecord(stdout, body)
			}
		}
	case "resume":
		if err = needID(); err == nil {
			req, _ := json.Marshal(map[string]string{"add_budget": *addBudget, "resume_token": *token})
			body, err = c.do(ctx, "POST", runPath("/resume"), req)
			if err == nil && !*asJSON {
				return printRecord(stdout, body)
			}
		}
	default:
		return fmt.Errorf("unknown runs command %q", verb)
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
		"total_tokens", "actual_cost_usd", "elapsed_ms", "deadline_ms", "last_action", "recoverable",
		"partial_result_available", "would_terminate"}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range order {
		v, ok := m[k]
		if !ok || v == nil || v == "" {
			continue
		}
		if b, err := json.Marshal(v); err == nil && (strings.HasPrefix(string(b), "{") || strings.HasPrefix(string(b), "[")) {
			v = string(b)
		}
		fmt.Fprintf(tw, "%s\t%v\n", k, v)
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
