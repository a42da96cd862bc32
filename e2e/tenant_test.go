package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/runstate"
)

// tenantPair is two agents' credentials and the tenants they name.
type tenantPair struct {
	desc             string
	keyA, keyB       string
	tenantA, tenantB string
	mod              func(*config.Config)
}

// tenantPairs: two API keys passed through (each names a tenant by its
// hash) and two virtual keys of two tenants.
func tenantPairs() []tenantPair {
	return []tenantPair{
		{desc: "pass-through keys", keyA: "sk-tenant-a", keyB: "sk-tenant-b",
			tenantA: "key-" + pipeline.KeyID("sk-tenant-a"), tenantB: "key-" + pipeline.KeyID("sk-tenant-b"),
			mod: func(*config.Config) {}},
		{desc: "virtual keys", keyA: "sk-acme-1", keyB: "sk-globex-1", tenantA: "acme", tenantB: "globex",
			mod: func(c *config.Config) {
				c.VirtualKeys = map[string]config.Principal{
					"sk-acme-1": {Tenant: "acme", Team: "red"}, "sk-globex-1": {Tenant: "globex", Team: "blue"}}
			}},
	}
}

// tenantRecord is the record of a run as the control plane shows it within
// one tenant.
func tenantRecord(t *testing.T, g *app.Gateway, name, tenant string) runstate.Record {
	t.Helper()
	var rec runstate.Record
	getJSON(t, adminURL(g)+"/api/v1/runs/"+url.PathEscape(name)+"?tenant="+url.QueryEscape(tenant), &rec)
	if rec.ID != name || rec.Tenant != tenant {
		t.Fatalf("asked for %s of %s, got %s of %s", name, tenant, rec.ID, rec.Tenant)
	}
	return rec
}

// sameRun reports whether two records show one run in one state.
func sameRun(a, b runstate.Record) bool {
	return a.Status == b.Status && a.AgentSteps == b.AgentSteps && a.ModelCalls == b.ModelCalls &&
		a.ToolCalls == b.ToolCalls && a.ToolAttempts == b.ToolAttempts && a.InputTokens == b.InputTokens &&
		a.ActualCostPicoUSD == b.ActualCostPicoUSD && a.Reason == b.Reason
}

// Runs belong to their tenant: a name, an echoed tool-call id or a parent
// link of another tenant's run reaches a run of the caller's own (or is
// refused), and the other tenant's run — its steps, spend and state, seen
// from its owner's side — is untouched. Two tenants using one run id each
// get their own run.
func TestTenantsShareNoRun(t *testing.T) {
	t.Parallel()
	for _, tp := range tenantPairs() {
		t.Run(tp.desc, func(t *testing.T) {
			t.Parallel()
			m := &toolLoop{finalAfter: 1000, in: 200, out: 20}
			up := newUpstream(t, m.serve)
			g := startGateway(t, up.URL, tp.mod)
			a := openaiClient(g, option.WithAPIKey(tp.keyA))
			b := openaiClient(g, option.WithAPIKey(tp.keyB))

			// A's run, two steps in, with a budget of 6 steps.
			runID, steps, _, _ := openaiAgent(t, a, false, 2, option.WithHeader("X-Run-Id", "r-ticket-42"),
				option.WithHeader("X-Run-Budget", "max_steps=6"))
			if runID != "r-ticket-42" || steps != 2 {
				t.Fatalf("setup: run %q, %d steps", runID, steps)
			}
			before := tenantRecord(t, g, "r-ticket-42", tp.tenantA)
			if before.AgentSteps != 2 || before.Status.Final() {
				t.Fatalf("setup: %+v", before)
			}

			// By X-Run-Id: B's calls under the same name are B's own run,
			// from its first step; B's looping tool calls end B's run only.
			var hdr *http.Response
			_, err := b.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			}, option.WithHeader("X-Run-Id", "r-ticket-42"), option.WithResponseInto(&hdr))
			if err != nil {
				t.Fatal(err)
			}
			if step, left := hdr.Header.Get("X-Run-Step"), hdr.Header.Get("X-Run-Budget-Remaining"); step != "1" ||
				strings.Contains(left, "steps=3") {
				t.Fatalf("B named A's run and got step %s, remaining %q", step, left)
			}
			if id := hdr.Header.Get("X-Run-Id"); id != "r-ticket-42" {
				t.Fatalf("B's run is named %q, want the name B sent", id)
			}
			openaiAgent(t, b, false, 8, option.WithHeader("X-Run-Id", "r-ticket-42"))
			if own := tenantRecord(t, g, "r-ticket-42", tp.tenantB); own.AgentSteps < 2 || own.Tenant != tp.tenantB {
				t.Fatalf("B's own run: %+v", own)
			}
			if after := tenantRecord(t, g, "r-ticket-42", tp.tenantA); !sameRun(before, after) {
				t.Fatalf("A's run changed by B's calls:\nbefore %+v\nafter  %+v", before, after)
			}

			// A bare name two tenants use is ambiguous to the control plane.
			resp, err := http.Get(adminURL(g) + "/api/v1/runs/r-ticket-42")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var amb struct{ Tenants []string }
			_ = json.Unmarshal(body, &amb)
			want := []string{tp.tenantA, tp.tenantB}
			slices.Sort(want)
			if resp.StatusCode != 409 || !slices.Equal(amb.Tenants, want) {
				t.Fatalf("bare shared name: %d %s", resp.StatusCode, body)
			}

			// By echoed tool-call ids: B sends a history holding the tool
			// call A's run was answered with.
			var aTurn *http.Response
			comp, err := a.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report.")},
				Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
					Name: "read_page", Parameters: openai.FunctionParameters{"type": "object"}})},
			}, option.WithResponseInto(&aTurn))
			if err != nil || len(comp.Choices[0].Message.ToolCalls) == 0 {
				t.Fatalf("setup: %v", err)
			}
			lineageRun := aTurn.Header.Get("X-Run-Id")
			lineageBefore := tenantRecord(t, g, lineageRun, tp.tenantA)
			echo := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read the report."), comp.Choices[0].Message.ToParam()}
			for _, tc := range comp.Choices[0].Message.ToolCalls {
				echo = append(echo, openai.ToolMessage("page", tc.ID))
			}
			var bTurn *http.Response
			if _, err := b.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini", Messages: echo,
			}, option.WithResponseInto(&bTurn)); err != nil {
				t.Fatal(err)
			}
			if id := bTurn.Header.Get("X-Run-Id"); id == lineageRun || bTurn.Header.Get("X-Run-Step") != "1" {
				t.Fatalf("B's echo of A's tool call continued run %s at step %s", id, bTurn.Header.Get("X-Run-Step"))
			}
			// The same echo from A continues A's run.
			var aNext *http.Response
			if _, err := a.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: "gpt-4o-mini", Messages: echo,
			}, option.WithResponseInto(&aNext)); err != nil {
				t.Fatal(err)
			}
			if id := aNext.Header.Get("X-Run-Id"); id != lineageRun || aNext.Header.Get("X-Run-Step") != "2" {
				t.Fatalf("A's own echo went to run %s step %s, want %s step 2", id, aNext.Header.Get("X-Run-Step"), lineageRun)
			}
			if after := tenantRecord(t, g, lineageRun, tp.tenantA); after.AgentSteps != lineageBefore.AgentSteps+1 {
				t.Fatalf("A's lineage run: %d steps, want %d", after.AgentSteps, lineageBefore.AgentSteps+1)
			}

			// By X-Parent-Run-Id: a parent B does not have is refused, the
			// same whether A has a run of that name or no tenant does.
			for _, parent := range []string{lineageRun, "r-nobody-has-this"} {
				_, err := b.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
					Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("sub-task")},
				}, option.WithHeader("X-Run-Id", "r-child-"+parent), option.WithHeader("X-Parent-Run-Id", parent))
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
					t.Fatalf("parent %s of no run of B's: %v", parent, err)
				}
			}
			if after := tenantRecord(t, g, lineageRun, tp.tenantA); after.AgentSteps != lineageBefore.AgentSteps+1 {
				t.Fatalf("A's run changed by B naming it as a parent: %+v", after)
			}
			// B's own run of that name is B's parent to draw on; A's run is
			// not spent by it.
			openaiAgent(t, b, false, 2, option.WithHeader("X-Run-Id", "r-sub-of-b"),
				option.WithHeader("X-Parent-Run-Id", "r-ticket-42"))
			if child := tenantRecord(t, g, "r-sub-of-b", tp.tenantB); child.ParentID != "r-ticket-42" || child.AgentSteps != 2 {
				t.Fatalf("B's sub-agent: %+v", child)
			}
			if after := tenantRecord(t, g, "r-ticket-42", tp.tenantA); !sameRun(before, after) {
				t.Fatalf("A's run spent by B's sub-agent:\nbefore %+v\nafter  %+v", before, after)
			}
			// A's sub-agent draws on A's run: the parent's steps are spent.
			openaiAgent(t, a, false, 10, option.WithHeader("X-Run-Id", "r-sub-of-a"),
				option.WithHeader("X-Parent-Run-Id", "r-ticket-42"))
			if child := tenantRecord(t, g, "r-sub-of-a", tp.tenantA); child.AgentSteps != 4 {
				t.Fatalf("A's sub-agent took %d steps of its parent's 4 left", child.AgentSteps)
			}
		})
	}
}

// The tool routes attribute a call by X-Run-Id within the caller's tenant.
func TestTenantsShareNoRunOnToolRoutes(t *testing.T) {
	t.Parallel()
	for _, tp := range tenantPairs() {
		t.Run(tp.desc, func(t *testing.T) {
			t.Parallel()
			c := newTLCounter()
			srv := tlMCPServer(t, c, false)
			up := tlModelCallsTool(t, "read", `{"path":"a.txt"}`)
			g := tlMCPGateway(t, srv.URL, up.URL, tp.mod)
			var resp *http.Response
			a := openaiClient(g, option.WithAPIKey(tp.keyA))
			if _, err := a.Chat.Completions.New(context.Background(),
				openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Read a.txt.")},
					Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
						Name: "read", Parameters: openai.FunctionParameters{"type": "object"}})},
				}, option.WithHeader("X-Run-Id", "r-job-7"), option.WithResponseInto(&resp)); err != nil {
				t.Fatal(err)
			}
			before := tenantRecord(t, g, "r-job-7", tp.tenantA)
			// B names A's run, and calls the very tool A's run is waiting on.
			cs := tlConnect(t, g, "fs", map[string]string{"X-Run-Id": "r-job-7", "Authorization": "Bearer " + tp.keyB})
			if res := tlCall(t, cs, "read", map[string]any{"path": "a.txt"}); res.IsError {
				t.Fatalf("B's tool call: %q", tlText(res))
			}
			if own := tenantRecord(t, g, "r-job-7", tp.tenantB); own.ToolAttempts != 1 {
				t.Fatalf("B's tool call was not counted on B's own run: %+v", own)
			}
			if after := tenantRecord(t, g, "r-job-7", tp.tenantA); !sameRun(before, after) {
				t.Fatalf("A's run changed by B's tool call:\nbefore %+v\nafter  %+v", before, after)
			}
			// Without run headers, B's call of the same tool and arguments is
			// not matched to A's outstanding call either.
			cs2 := tlConnect(t, g, "fs", map[string]string{"Authorization": "Bearer " + tp.keyB})
			tlCall(t, cs2, "read", map[string]any{"path": "a.txt"})
			if after := tenantRecord(t, g, "r-job-7", tp.tenantA); !sameRun(before, after) {
				t.Fatalf("A's run changed by B's unnamed tool call:\nbefore %+v\nafter  %+v", before, after)
			}
			// A's own call is A's.
			cs3 := tlConnect(t, g, "fs", map[string]string{"Authorization": "Bearer " + tp.keyA})
			tlCall(t, cs3, "read", map[string]any{"path": "a.txt"})
			if after := tenantRecord(t, g, "r-job-7", tp.tenantA); after.ToolAttempts != before.ToolAttempts+1 {
				t.Fatalf("A's own tool call: %d attempts, want %d", after.ToolAttempts, before.ToolAttempts+1)
			}
		})
	}
}
