package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
)

// An echoed assistant text continues its own conversation's run: two
// conversations of one tenant whose assistant said the same words are two
// runs, and each conversation's next task joins its own session.
func TestTextLineageIsPerConversation(t *testing.T) {
	t.Parallel()
	type api struct {
		name  string
		codec wire.Codec
		// request is a history of user turns with the final answer "Done."
		// after each but the last; answer is that final answer.
		request func(users ...string) string
		answer  string
	}
	chat := func(users ...string) string {
		var msgs string
		for i, u := range users {
			if i > 0 {
				msgs += `,{"role":"assistant","content":"Done."},`
			}
			msgs += fmt.Sprintf(`{"role":"user","content":%q}`, u)
		}
		return `{"model":"gpt-4o-mini","messages":[` + msgs + `]}`
	}
	responses := func(users ...string) string {
		var items string
		for i, u := range users {
			if i > 0 {
				items += `,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]},`
			}
			items += fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":%q}]}`, u)
		}
		return `{"model":"gpt-4o-mini","input":[` + items + `]}`
	}
	messages := func(users ...string) string {
		var msgs string
		for i, u := range users {
			if i > 0 {
				msgs += `,{"role":"assistant","content":[{"type":"text","text":"Done."}]},`
			}
			// Frameworks mark the newest message for the prompt cache.
			msgs += fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q`, u)
			if i == len(users)-1 {
				msgs += `,"cache_control":{"type":"ephemeral"}`
			}
			msgs += `}]}`
		}
		return `{"model":"claude-haiku-4-5","max_tokens":100,"messages":[` + msgs + `]}`
	}
	for _, a := range []api{
		{"chat", openai.Chat{}, chat, finalResponse},
		{"responses", openai.Responses{}, responses,
			`{"id":"resp_1","object":"response","status":"completed","model":"gpt-4o-mini","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[]}]}],"usage":{"input_tokens":100,"output_tokens":5,"total_tokens":105}}`},
		{"messages", anthropic.Messages{}, messages,
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","usage":{"input_tokens":100,"output_tokens":5}}`},
	} {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, time.Now, time.Minute)
			ctx := context.Background()
			call := func(body, session string) string {
				t.Helper()
				turn := p.Begin(ctx, &pipeline.Call{Body: []byte(body), SessionID: session}, a.codec)
				if turn.Answer != nil {
					t.Fatalf("refused: %s", turn.Answer.Body)
				}
				p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(a.answer)})
				return turn.RunID()
			}
			first := call(a.request("Summarise the March report."), "s-march")
			second := call(a.request("Summarise the April report."), "s-april")
			if first == second {
				t.Fatalf("two first turns share run %s", first)
			}
			// The March conversation goes on after April's identical answer.
			next := call(a.request("Summarise the March report.", "Now the key risks."), "")
			rec, _, _ := p.Record(next)
			if next == first || next == second || rec.SessionID != "s-march" {
				t.Fatalf("March's next task: run %s in session %q, want a new run in s-march", next, rec.SessionID)
			}
		})
	}
}

// What an agent reads of its run names it as the agent does, never by the
// run's tenant-scoped id: the headers, and the gateway's own answer once
// the run has ended.
func TestAnswersNameTheRun(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, time.Now, time.Minute)
	ctx := context.Background()
	call := func() *pipeline.Turn {
		return p.Begin(ctx, &pipeline.Call{Body: taskBody, RunID: "r-7", Principal: pipeline.Principal{Tenant: "acme"}}, openai.Chat{})
	}
	turn := call()
	p.Finish(ctx, turn, pipeline.Outcome{Status: 200, Body: []byte(toolResponse)})
	if _, err := p.Cancel(pipeline.RunRef("r-7", "acme")); err != nil {
		t.Fatal(err)
	}
	turn = call()
	if turn.Answer == nil {
		t.Fatal("a cancelled run's call was forwarded")
	}
	headers := map[string]string{}
	p.Headers(turn, func(k, v string) { headers[k] = v })
	body := string(turn.Answer.Body)
	if headers[pipeline.HeaderRunID] != "r-7" || !strings.Contains(body, "run r-7,") || strings.ContainsRune(body, 0x1f) {
		t.Fatalf("X-Run-Id %q, answer %s", headers[pipeline.HeaderRunID], body)
	}
	p.Finish(ctx, turn, pipeline.Outcome{Status: turn.Answer.Status})
}
