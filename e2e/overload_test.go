package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/haltline/haltline/config"
)

// Under limits.max_body_bytes_in_flight the gateway holds at most that many
// bytes of request bodies: a large call past it waits limits.body_wait with
// its body unread, then is answered 503 in its provider's format with
// Retry-After, without reaching the provider; a small body read with the
// headers is not held up; once the held call settles, room is back.
func TestBodiesInFlightAreBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	entered := make(chan string, 8)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		entered <- r.URL.Path
		<-hold
		if strings.HasSuffix(r.URL.Path, "/messages") {
			writeJSON(w, 200, fixture(t, "anthropic/response-parallel-tool-use.json"))
			return
		}
		writeJSON(w, 200, fixture(t, "openai-chat/response-usage-cache-hit.json"))
	})
	g := startGateway(t, up.URL, func(c *config.Config) {
		c.Limits.MaxBodyBytesInFlight = 300 << 10
		c.Limits.BodyWait = 150 * time.Millisecond
	})
	history := strings.Repeat("a long history of tool results, ", 200<<10/32) // 200 KB
	chat := func(text string) (*openai.ChatCompletion, *http.Response, error) {
		var resp *http.Response
		client := openaiClient(g)
		c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		}, option.WithResponseInto(&resp))
		return c, resp, err
	}
	type result struct {
		c   *openai.ChatCompletion
		err error
	}
	first, small := make(chan result, 1), make(chan result, 1)
	go func() { c, _, err := chat(history); first <- result{c, err} }()
	<-entered // the first body is held, by the call in flight

	start := time.Now()
	_, resp, err := chat(history)
	waited := time.Since(start)
	var oaErr *openai.Error
	if !errors.As(err, &oaErr) || oaErr.StatusCode != 503 || oaErr.Type != "server_error" || oaErr.Code != "service_unavailable" {
		t.Fatalf("second 200 KB chat call: want a 503 service_unavailable, got %v", err)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After: %v", resp.Header)
	}
	if waited < 150*time.Millisecond {
		t.Errorf("refused after %v, before body_wait", waited)
	}
	ac := anthropicClient(g)
	_, err = ac.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(history))},
	})
	var anErr *anthropic.Error
	if !errors.As(err, &anErr) || anErr.StatusCode != 503 || !strings.Contains(anErr.RawJSON(), `"overloaded_error"`) {
		t.Fatalf("200 KB messages call: want a 503 overloaded_error, got %v", err)
	}

	go func() { c, _, err := chat("a short question"); small <- result{c, err} }()
	if p := <-entered; p != "/v1/chat/completions" {
		t.Fatalf("upstream got %s", p)
	}
	close(hold)
	for name, ch := range map[string]chan result{"held": first, "small": small} {
		if r := <-ch; r.err != nil || r.c.Usage.PromptTokens == 0 {
			t.Fatalf("%s call: %v", name, r.err)
		}
	}
	if c, _, err := chat(history); err != nil || c.Usage.PromptTokens == 0 {
		t.Fatalf("200 KB call once the budget is free: %v", err)
	}
	if n := len(up.requests()); n != 3 {
		t.Fatalf("upstream received %d calls, want 3: the refused ones must not reach it", n)
	}
}
