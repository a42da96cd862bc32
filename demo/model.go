package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Model is a scripted chat-completions upstream. Its answers depend on the
// task (the first user message) and on how many tool results the history
// holds, so it behaves like a model steering an agent.
type Model struct {
	calls atomic.Int64
	// Latency delays every answer.
	Latency time.Duration
}

// Calls is how many requests the model has answered.
func (m *Model) Calls() int64 { return m.calls.Load() }

type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools         []json.RawMessage `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type toolCall struct {
	name, args string
}

func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, 404)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var req chatRequest
	if err != nil || json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"message":"bad request","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	n := m.calls.Add(1)
	if m.Latency > 0 {
		time.Sleep(m.Latency)
	}
	task := ""
	results := 0
	for _, msg := range req.Messages {
		if msg.Role == "user" && task == "" {
			_ = json.Unmarshal(msg.Content, &task)
		}
		if msg.Role == "tool" {
			results++
		}
	}
	text, calls := script(task, results, len(req.Tools) > 0, n)
	usage := map[string]any{
		"prompt_tokens":             len(body)/4 + 12,
		"completion_tokens":         18 + len(text)/4 + 24*len(calls),
		"total_tokens":              len(body)/4 + 30 + len(text)/4 + 24*len(calls),
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
	}
	usage["total_tokens"] = usage["prompt_tokens"].(int) + usage["completion_tokens"].(int)
	id := fmt.Sprintf("chatcmpl-demo%06d", n)
	if req.Stream {
		m.stream(w, id, req, text, calls, usage, n)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
		tcs := []any{}
		for i, c := range calls {
			tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
				"function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msg["tool_calls"] = tcs
	} else {
		msg["content"] = text
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   usage,
	})
}

func (m *Model) stream(w http.ResponseWriter, id string, req chatRequest, text string, calls []toolCall, usage map[string]any, n int64) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl, _ := w.(http.Flusher)
	created := time.Now().Unix()
	send := func(delta map[string]any, finish any) {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			chunk["usage"] = nil
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
		for i, c := range calls {
			send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d_%d", n, i),
				"type": "function", "function": map[string]any{"name": c.name, "arguments": ""}}}}, nil)
			half := len(c.args) / 2
			for _, part := range []string{c.args[:half], c.args[half:]} {
				send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": part}}}}, nil)
			}
		}
	} else {
		for _, word := range strings.SplitAfter(text, " ") {
			send(map[string]any{"content": word}, nil)
		}
	}
	send(map[string]any{}, finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created,
			"model": req.Model, "choices": []any{}, "usage": usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// script is the model's behaviour per task.
func script(task string, results int, hasTools bool, n int64) (string, []toolCall) {
	switch {
	case !hasTools:
		// A wrap-up call: tools were removed, so conclude.
		return fmt.Sprintf("Conclusion from %d tool results: the logs show no errors in the window I could query. "+
			"Unfinished: widen the time range and check the other services.", results), nil
	case strings.Contains(task, "order"):
		switch results {
		case 0:
			return "", []toolCall{{"lookup_order", `{"order_id":"1234"}`}}
		case 1:
			return "", []toolCall{{"send_email", `{"to":"customer@example.com","subject":"Your order 1234","body":"It ships today."}`}}
		}
		return "Order 1234 ships today; I emailed the customer to say so.", nil
	case strings.Contains(task, "logs"):
		// The incident: the same query again and again, only the timestamp moves.
		ts := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC).Add(time.Duration(results) * 17 * time.Second)
		return "", []toolCall{{"query_logs", fmt.Sprintf(`{"query":"level:error service:checkout","since":"%s"}`, ts.Format(time.RFC3339))}}
	case strings.Contains(task, "report"):
		// A long task that keeps making progress: a new page each time.
		return "", []toolCall{{"read_page", fmt.Sprintf(`{"page":%d}`, results+1)}}
	}
	return "Done.", nil
}
