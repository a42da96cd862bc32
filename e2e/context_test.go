package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/contextmgr"
	"github.com/haltline/haltline/wire"
)

// smallWindow is a price catalog with one model of a 32k window.
func smallWindow(t *testing.T) func(*config.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prices.yaml")
	cat := "models:\n  small-32k:\n    context_window: 32000\n    input_usd_per_mtok: 0.15\n    cached_input_usd_per_mtok: 0.075\n    output_usd_per_mtok: 0.60\n"
	if err := os.WriteFile(path, []byte(cat), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *config.Config) { c.Prices = path }
}

// prefixBreaks counts the forwarded calls whose cacheable prefix differs
// from the previous call's: the system prompt and tools must be identical,
// and the previous messages must open the new messages array unchanged
// (providers cache tools, system and messages in that order, whatever the
// JSON key order).
func prefixBreaks(reqs []recorded) int {
	breaks := 0
	for i := 1; i < len(reqs); i++ {
		prev, cur := reqs[i-1].Body, reqs[i].Body
		pm, cm := gjson.GetBytes(prev, "messages").Raw, gjson.GetBytes(cur, "messages").Raw
		same := gjson.GetBytes(prev, "system").Raw == gjson.GetBytes(cur, "system").Raw &&
			gjson.GetBytes(prev, "tools").Raw == gjson.GetBytes(cur, "tools").Raw &&
			len(pm) > 1 && strings.HasPrefix(cm, pm[:len(pm)-1])
		if !same {
			breaks++
		}
	}
	return breaks
}

// sentBodies records the bodies the agent sends, before the gateway sees
// them, through the SDKs' middleware.
type sentBodies struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (s *sentBodies) record(req *http.Request) {
	if req.GetBody == nil {
		return
	}
	rc, err := req.GetBody()
	if err != nil {
		return
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	s.mu.Lock()
	s.bodies = append(s.bodies, b)
	s.mu.Unlock()
}

// cachedShare is the share of the bytes of calls 2..n that repeat the
// previous call's bytes from the start: what a provider's prompt cache can
// serve (it keys on the prefix).
func cachedShare(bodies [][]byte) float64 {
	var same, total int
	for i := 1; i < len(bodies); i++ {
		prev, cur := bodies[i-1], bodies[i]
		n := 0
		for n < len(prev) && n < len(cur) && prev[n] == cur[n] {
			n++
		}
		same += n
		total += len(cur)
	}
	if total == 0 {
		return 0
	}
	return float64(same) / float64(total)
}

// A 40-step agent with 30 KB tool outputs against a model whose window is
// 32k runs to completion with no forwarded request over 0.6 × window, and
// the upstream sees byte-identical prefixes on consecutive calls between
// compressions.
func TestContextStaysUnderWatermark(t *testing.T) {
	t.Parallel()
	const steps = 40
	watermark := int64(0.6 * 32000)
	big := strings.Repeat("row 42: status=ok latency=17ms region=eu-west-1 ", 30000/48)
	for _, tc := range []struct {
		desc      string
		anthropic bool
	}{{"openai", false}, {"anthropic", true}} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1 << 30, finalAtCall: steps, in: 1000, out: 20}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL, smallWindow(t))
			ctx := context.Background()
			n := 0
			var sent sentBodies
			if tc.anthropic {
				client := anthropicClient(g, aoption.WithMiddleware(func(req *http.Request, next aoption.MiddlewareNext) (*http.Response, error) {
					sent.record(req)
					return next(req)
				}))
				msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Audit every page. You must never skip a page."))}
				tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "read_page",
					InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}}}
				for ; n < steps+1; n++ {
					msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "small-32k", MaxTokens: 512,
						System: []anthropic.TextBlockParam{{Text: "You are an auditor."}}, Messages: msgs, Tools: tools})
					if err != nil {
						t.Fatalf("step %d: %v", n+1, err)
					}
					if msg.StopReason != anthropic.StopReasonToolUse {
						break
					}
					msgs = append(msgs, msg.ToParam())
					var res []anthropic.ContentBlockParamUnion
					for _, c := range msg.Content {
						if c.Type == "tool_use" {
							res = append(res, anthropic.NewToolResultBlock(c.ID, fmt.Sprintf("page %d\n%s", n, big), false))
						}
					}
					msgs = append(msgs, anthropic.NewUserMessage(res...))
				}
			} else {
				client := openaiClient(g, option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
					sent.record(req)
					return next(req)
				}))
				msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are an auditor."),
					openai.UserMessage("Audit every page. You must never skip a page.")}
				tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
					Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})}
				for ; n < steps+1; n++ {
					var resp *http.Response
					c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "small-32k", Messages: msgs, Tools: tools},
						option.WithResponseInto(&resp))
					if err != nil {
						t.Fatalf("step %d: %v", n+1, err)
					}
					msg := c.Choices[0].Message
					if len(msg.ToolCalls) == 0 {
						break
					}
					msgs = append(msgs, msg.ToParam())
					for _, tc := range msg.ToolCalls {
						msgs = append(msgs, openai.ToolMessage(fmt.Sprintf("page %d\n%s", n, big), tc.ID))
					}
				}
			}
			if n != steps-1 {
				t.Fatalf("the agent stopped after %d steps", n+1)
			}
			api := wire.APIChat
			if tc.anthropic {
				api = wire.APIMessages
			}
			reqs := up.requests()
			for i, r := range reqs {
				if est := contextmgr.Estimate(api, r.Body); est > watermark {
					t.Fatalf("call %d forwarded %d tokens, over the watermark %d", i+1, est, watermark)
				}
				if !bytes.Contains(r.Body, []byte("never skip a page")) {
					t.Fatalf("call %d lost the task", i+1)
				}
			}
			breaks := prefixBreaks(reqs)
			fwd := make([][]byte, len(reqs))
			var sentBytes, fwdBytes int
			for i, r := range reqs {
				fwd[i] = r.Body
				fwdBytes += len(r.Body)
			}
			for _, b := range sent.bodies {
				sentBytes += len(b)
			}
			before, after := cachedShare(sent.bodies), cachedShare(fwd)
			t.Logf("%d calls, %d prefix breaks; bytes sent by the agent %d, forwarded %d; cacheable share of each call (prefix repeated from the previous call): as sent %.2f, as forwarded %.2f",
				len(reqs), breaks, sentBytes, fwdBytes, before, after)
			if after < 0.5 {
				t.Fatalf("only %.2f of the forwarded bytes repeat the previous call's prefix: compression is not stable", after)
			}
			if breaks > 6 {
				t.Fatalf("%d of %d calls changed the prefix: compression is not stable", breaks, len(reqs))
			}
		})
	}
}

// With a summariser model named in policy, the dropped turns are summarised
// by that model through the same upstream, charged to the run (a model
// call, tokens and cost — not an agent step), and the summary lands in the
// forwarded system segment.
func TestContextSummariserModel(t *testing.T) {
	t.Parallel()
	// Enough steps that cutting long results is not enough and old turns
	// are dropped (and summarised).
	const steps = 45
	big := strings.Repeat("row 42: status=ok latency=17ms region=eu-west-1 ", 30000/48)
	m := &toolLoop{finalAfter: 1 << 30, finalAtCall: 1 << 30, in: 1000, out: 20}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if bytes.Contains(body, []byte("You compress an AI agent")) {
			writeJSON(w, 200, []byte(`{"id":"chatcmpl-sum","object":"chat.completion","created":1,"model":"small-32k","choices":[{"index":0,"message":{"role":"assistant","content":"SUMMARY-FROM-MODEL: pages read, all fine.\nFACT region: eu-west-1"},"finish_reason":"stop"}],"usage":{"prompt_tokens":700,"completion_tokens":30,"total_tokens":730}}`))
			return
		}
		m.serve(w, r, body)
	})
	g := startGateway(t, up.URL, smallWindow(t), withPolicy(policyDir(t, `{"haltline":{"budgets":{"defaults":{"summariser_model":"small-32k"}}}}`)))
	client := openaiClient(g)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are an auditor."),
		openai.UserMessage("Audit every page.")}
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})}
	var runID string
	for n := range steps {
		var resp *http.Response
		c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "small-32k", Messages: msgs, Tools: tools},
			option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("step %d: %v", n+1, err)
		}
		runID = resp.Header.Get("X-Run-Id")
		msg := c.Choices[0].Message
		msgs = append(msgs, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			msgs = append(msgs, openai.ToolMessage(fmt.Sprintf("page %d\n%s", n, big), tc.ID))
		}
	}
	var summaries, withSummary int
	for _, r := range up.requests() {
		if bytes.Contains(r.Body, []byte("You compress an AI agent")) {
			summaries++
		} else if bytes.Contains(r.Body, []byte("SUMMARY-FROM-MODEL")) {
			withSummary++
		}
	}
	rec := runRecord(t, g, runID)
	t.Logf("%d summary calls; %d forwarded calls carry the model's summary; record: steps %d, model calls %d", summaries, withSummary, rec.AgentSteps, rec.ModelCalls)
	if summaries == 0 || withSummary == 0 {
		t.Fatalf("summaries %d, calls with the summary %d", summaries, withSummary)
	}
	if rec.AgentSteps != steps || rec.ModelCalls != int64(steps+summaries) {
		t.Fatalf("record: steps %d model calls %d, want %d and %d", rec.AgentSteps, rec.ModelCalls, steps, steps+summaries)
	}
	if rec.InputTokens != int64(steps*1000+summaries*700) {
		t.Fatalf("input tokens %d: the summary calls are not charged", rec.InputTokens)
	}
}
