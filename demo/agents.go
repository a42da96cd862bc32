package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// Agent is a scripted agent: an ordinary tool loop, as a framework runs it,
// with no knowledge of the gateway beyond its base URL.
type Agent struct {
	Name   string
	Task   string
	Stream bool
	// Budget is sent as X-Run-Budget when set.
	Budget string
	// MaxSteps is the agent's own cap, the only thing that stops a runaway
	// agent without a gateway.
	MaxSteps int
}

// Agents are the demo's scripted agents.
var Agents = []Agent{
	{Name: "order-agent", Task: "Check order 1234 and tell the customer when it ships.", MaxSteps: 10},
	{Name: "runaway-agent", Task: "Find the errors in the checkout logs from last night.", Stream: true, MaxSteps: 30},
	{Name: "report-agent", Task: "Read the quarterly report page by page and summarise it.", Budget: "max_steps=5", MaxSteps: 30},
}

var tools = []openai.ChatCompletionToolUnionParam{
	tool("lookup_order", "Look an order up by id."),
	tool("send_email", "Send an email."),
	tool("query_logs", "Query the log store."),
	tool("read_page", "Read one page of a document."),
}

func tool(name, desc string) openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: name, Description: openai.String(desc),
		Parameters: shared.FunctionParameters{"type": "object", "additionalProperties": true},
	})
}

// execute runs a tool on the agent's side.
func execute(name, args string) string {
	switch name {
	case "lookup_order":
		return `{"order_id":"1234","status":"packed","ships":"today"}`
	case "send_email":
		return `{"sent":true}`
	case "query_logs":
		return "no data"
	case "read_page":
		var a struct{ Page int }
		_ = json.Unmarshal([]byte(args), &a)
		return fmt.Sprintf("page %d: revenue grew in region %d", a.Page, a.Page)
	}
	return "unknown tool"
}

// Run drives every agent through the gateway and prints each step and each
// run's record.
func Run(ctx context.Context, out io.Writer, dataURL, adminURL string, agents []Agent) error {
	client := openai.NewClient(option.WithBaseURL(dataURL+"/v1"), option.WithAPIKey("sk-demo-no-key-needed"),
		option.WithMaxRetries(0), option.WithRequestTimeout(20*time.Second))
	var runIDs []string
	for _, a := range agents {
		fmt.Fprintf(out, "\n== %s: %q (agent's own cap: %d steps%s)\n", a.Name, a.Task, a.MaxSteps, budgetNote(a.Budget))
		id, err := runAgent(ctx, client, a, out, adminURL)
		if err != nil {
			return fmt.Errorf("%s: %w", a.Name, err)
		}
		runIDs = append(runIDs, id)
	}
	fmt.Fprintln(out, "\n== Run records (GET /api/v1/runs/{id})")
	for _, id := range runIDs {
		rec, err := fetch(ctx, adminURL+"/api/v1/runs/"+id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n", rec)
	}
	return nil
}

func budgetNote(b string) string {
	if b == "" {
		return ""
	}
	return "; X-Run-Budget: " + b
}

func runAgent(ctx context.Context, client openai.Client, a Agent, out io.Writer, adminURL string) (string, error) {
	msgs := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are a helpful operations agent. Use tools."),
		openai.UserMessage(a.Task),
	}
	opts := []option.RequestOption{}
	if a.Budget != "" {
		opts = append(opts, option.WithHeader("X-Run-Budget", a.Budget))
	}
	runID := ""
	for step := 1; step <= a.MaxSteps; step++ {
		params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools}
		var resp *http.Response
		callOpts := append(opts, option.WithResponseInto(&resp))
		var msg openai.ChatCompletionMessage
		var finish string
		if a.Stream {
			stream := client.Chat.Completions.NewStreaming(ctx, params, callOpts...)
			acc := openai.ChatCompletionAccumulator{}
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				return runID, err
			}
			if len(acc.Choices) == 0 {
				return runID, fmt.Errorf("empty stream")
			}
			msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
		} else {
			c, err := client.Chat.Completions.New(ctx, params, callOpts...)
			if err != nil {
				return runID, err
			}
			msg, finish = c.Choices[0].Message, c.Choices[0].FinishReason
		}
		if resp != nil {
			runID = resp.Header.Get("X-Run-Id")
		}
		printStep(ctx, out, step, resp, msg, adminURL)
		if finish != "tool_calls" || len(msg.ToolCalls) == 0 {
			fmt.Fprintf(out, "   final answer (finish_reason=%s): %s\n", finish, indent(msg.Content))
			return runID, nil
		}
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			msgs = append(msgs, openai.ToolMessage(execute(tc.Function.Name, tc.Function.Arguments), tc.ID))
		}
	}
	fmt.Fprintf(out, "   the agent hit its own cap of %d steps\n", a.MaxSteps)
	return runID, nil
}

func printStep(ctx context.Context, out io.Writer, step int, resp *http.Response, msg openai.ChatCompletionMessage, adminURL string) {
	if resp == nil {
		return
	}
	h := resp.Header
	action := "answer"
	if len(msg.ToolCalls) > 0 {
		parts := []string{}
		for _, tc := range msg.ToolCalls {
			parts = append(parts, tc.Function.Name+tc.Function.Arguments)
		}
		action = "calls " + strings.Join(parts, ", ")
	}
	var rec struct {
		Status string  `json:"status"`
		In     int64   `json:"input_tokens"`
		Out    int64   `json:"output_tokens"`
		Cost   float64 `json:"actual_cost_usd"`
	}
	if b, err := fetch(ctx, adminURL+"/api/v1/runs/"+h.Get("X-Run-Id")); err == nil {
		_ = json.Unmarshal(b, &rec)
	}
	fmt.Fprintf(out, "  step %d  run=%s  state=%s  tokens in=%d out=%d  cost=$%.6f  %s\n",
		step, h.Get("X-Run-Id"), rec.Status, rec.In, rec.Out, rec.Cost, action)
	if t := h.Get("X-Run-Termination"); t != "" {
		fmt.Fprintf(out, "   gateway ended the run: %s\n", t)
	}
}

func indent(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n     ") }

func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}
