package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/tmc/langchaingo/agents"
	"github.com/tmc/langchaingo/chains"
	"github.com/tmc/langchaingo/llms/openai"
	"github.com/tmc/langchaingo/tools"
)

// checks are the scripted model's scripts and the run headers sent, as in
// matrix.mjs.
var checks = []struct {
	name, script string
	headers      map[string]string
}{
	{"grouped", "tool3", nil},
	{"max_steps", "tool5", map[string]string{"X-Run-Budget": "max_steps=3"}},
	{"loop", "loop", nil},
	{"default_tokens", "tool3", map[string]string{"X-Run-Budget": "max_tokens=50000"}},
}

type run struct {
	ID     string `json:"run_id"`
	Tenant string `json:"tenant"`
	Status string `json:"status"`
	Reason string `json:"reason"`
	Steps  int    `json:"agent_steps"`
}

type result struct {
	Framework string `json:"framework"`
	Check     string `json:"check"`
	PromptID  string `json:"prompt_id"`
	Returned  bool   `json:"returned"`
	Error     string `json:"error"`
	Text      string `json:"text"`
	ToolRuns  int    `json:"tool_runs"`
	Runs      []run  `json:"runs"`
}

// headerTransport adds the run headers: langchaingo takes an HTTP client.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// readPage is the agent's tool; it counts its runs.
type readPage struct{ runs *int }

func (readPage) Name() string        { return "read_page" }
func (readPage) Description() string { return "Read one page of the report." }
func (t readPage) Call(_ context.Context, input string) (string, error) {
	*t.runs++
	return "Page " + input + ": quarterly numbers, nothing unusual.", nil
}

func main() {
	gw, admin := os.Getenv("HALTLINE_GATEWAY_URL"), os.Getenv("HALTLINE_ADMIN_URL")
	if gw == "" || admin == "" {
		fmt.Fprintln(os.Stderr, "HALTLINE_GATEWAY_URL and HALTLINE_ADMIN_URL are set by e2e TestFrameworkMatrix")
		os.Exit(2)
	}
	for i, c := range checks {
		out := result{Framework: "langchaingo functions agent openai", Check: c.name, PromptID: fmt.Sprintf("go%d", i)}
		before, err := runs(admin)
		if err != nil {
			fail(err)
		}
		llm, err := openai.New(openai.WithBaseURL(gw+"/v1"), openai.WithToken("sk-agent-frameworks"),
			openai.WithModel("gpt-4o-mini"), openai.WithHTTPClient(&http.Client{Transport: headerTransport(c.headers)}))
		if err != nil {
			fail(err)
		}
		agent := agents.NewOpenAIFunctionsAgent(llm, []tools.Tool{readPage{&out.ToolRuns}})
		exec := agents.NewExecutor(agent, agents.WithMaxIterations(10))
		prompt := fmt.Sprintf("Read the report page by page, then summarise it. [script:%s] (#%s)", c.script, out.PromptID)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out.Text, err = chains.Run(ctx, exec, prompt)
		cancel()
		out.Returned = err == nil
		if err != nil {
			out.Error = err.Error()
		}
		if out.Runs, err = newRuns(admin, before); err != nil {
			fail(err)
		}
		b, _ := json.Marshal(out)
		fmt.Printf("RESULT %s\n", b)
	}
}

func runs(admin string) ([]run, error) {
	resp, err := http.Get(admin + "/api/v1/runs")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l struct {
		Runs []run `json:"runs"`
	}
	return l.Runs, json.NewDecoder(resp.Body).Decode(&l)
}

// newRuns are the runs created since before, once none is deciding.
func newRuns(admin string, before []run) ([]run, error) {
	seen := map[string]bool{}
	for _, r := range before {
		seen[r.Tenant+"/"+r.ID] = true
	}
	for i := 0; ; i++ {
		all, err := runs(admin)
		if err != nil {
			return nil, err
		}
		fresh, deciding := []run{}, false
		for _, r := range all {
			if !seen[r.Tenant+"/"+r.ID] {
				fresh = append(fresh, r)
				deciding = deciding || r.Status == "deciding"
			}
		}
		if !deciding || i >= 100 {
			return fresh, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "langchaingo:", err)
	os.Exit(1)
}
