package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/haltline/haltline/wire"
)

// The official SDK reads what the gateway writes itself: synthetic final
// answers and error bodies, served from a loopback server.

const finalText = "Budget reached. Best conclusion so far: \"42\" <ok> & done.\nUnfinished: none — é."

// serve answers every request with status, content type and body.
func serve(t *testing.T, status int, contentType string, body []byte) *oai.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("x-should-retry", "false")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	c := oai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	return &c
}

var chatParams = oai.ChatCompletionNewParams{
	Model:    "gpt-4o",
	Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
}

var responsesParams = responses.ResponseNewParams{
	Model: "gpt-5",
	Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("hi")},
}

func TestSyntheticFinalChatSDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc         string
		stream       bool
		includeUsage bool
	}{
		{"json", false, false},
		{"stream", true, false},
		{"stream with usage", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			req := &wire.Request{Model: "gpt-4o", Stream: tc.stream, IncludeUsage: tc.includeUsage}
			ct, body := Chat{}.SyntheticFinal(req, finalText)
			client := serve(t, 200, ct, body)
			ctx := context.Background()
			if !tc.stream {
				if ct != "application/json" {
					t.Fatalf("content type %q", ct)
				}
				res, err := client.Chat.Completions.New(ctx, chatParams)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(res.ID, "chatcmpl-haltline-") || res.Choices[0].Message.Content != finalText ||
					res.Choices[0].FinishReason != "stop" || res.Usage.TotalTokens != 0 {
					t.Fatalf("got %+v", res)
				}
				checkOwnParse(t, Chat{}, body)
				return
			}
			if ct != "text/event-stream" {
				t.Fatalf("content type %q", ct)
			}
			stream := client.Chat.Completions.NewStreaming(ctx, chatParams)
			var acc oai.ChatCompletionAccumulator
			sawUsage := false
			for stream.Next() {
				chunk := stream.Current()
				if !acc.AddChunk(chunk) {
					t.Fatalf("accumulator refused %s", chunk.RawJSON())
				}
				if len(chunk.Choices) == 0 && chunk.JSON.Usage.Valid() {
					sawUsage = true
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Choices[0].Message.Content != finalText || acc.Choices[0].FinishReason != "stop" {
				t.Fatalf("accumulated %+v", acc.Choices)
			}
			if sawUsage != tc.includeUsage {
				t.Fatalf("usage chunk %v, client asked %v", sawUsage, tc.includeUsage)
			}
			// The gateway's own tap reads it back the same way.
			tap := Chat{}.NewStreamTap(req)
			if out := feedCuts(tap, body, []int{10, 200}); string(out) != string(body) && tc.includeUsage {
				t.Fatal("tap changed a synthetic stream")
			}
			if r := tap.Response(); r.Text != finalText || r.FinishReason != "stop" {
				t.Fatalf("tap read %+v", r)
			}
		})
	}
}

func checkOwnParse(t *testing.T, c wire.Codec, body []byte) {
	t.Helper()
	r, err := c.ParseResponse(body)
	if err != nil || r.Text != finalText || r.FinishReason != "stop" || !r.HasUsage || r.Usage != (wire.Usage{}) {
		t.Fatalf("own parse: %v %+v", err, r)
	}
}

func TestSyntheticFinalResponsesSDK(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		ct, body := Responses{}.SyntheticFinal(&wire.Request{Model: "gpt-5"}, finalText)
		client := serve(t, 200, ct, body)
		res, err := client.Responses.New(ctx, responsesParams)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.ID, "resp_haltline_") || res.OutputText() != finalText || res.Status != "completed" {
			t.Fatalf("got %+v", res)
		}
		checkOwnParse(t, Responses{}, body)
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		req := &wire.Request{Model: "gpt-5", Stream: true}
		ct, body := Responses{}.SyntheticFinal(req, finalText)
		if ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		client := serve(t, 200, ct, body)
		stream := client.Responses.NewStreaming(ctx, responsesParams)
		var deltas strings.Builder
		var acc responses.ResponseAccumulator
		var completed *responses.Response
		seq := int64(0)
		for stream.Next() {
			ev := stream.Current()
			if ev.SequenceNumber != seq {
				t.Fatalf("sequence %d, want %d", ev.SequenceNumber, seq)
			}
			seq++
			switch ev.Type {
			case "response.output_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.completed":
				r := ev.AsResponseCompleted().Response
				completed = &r
			}
			// The SDK's accumulator takes the same events as server events.
			var sev responses.ResponsesServerEventUnion
			if err := json.Unmarshal([]byte(ev.RawJSON()), &sev); err != nil {
				t.Fatal(err)
			}
			if err := acc.AddEvent(sev); err != nil {
				t.Fatalf("accumulator refused %s: %v", ev.Type, err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if seq != 9 || deltas.String() != finalText {
			t.Fatalf("%d events, deltas %q", seq, deltas.String())
		}
		if completed == nil || completed.OutputText() != finalText || completed.Status != "completed" {
			t.Fatalf("completed %+v", completed)
		}
		if snap := acc.Snapshot(); snap.OutputText() != finalText || snap.TerminalEvent != "response.completed" {
			t.Fatalf("accumulator snapshot %+v", snap)
		}
		rec, err := acc.ReconstructedResponse()
		if err != nil || rec.OutputText() != finalText {
			t.Fatalf("reconstructed %v %+v", err, rec)
		}
		tap := Responses{}.NewStreamTap(req)
		feedCuts(tap, body, []int{33, 34, 500})
		if r := tap.Response(); r.Text != finalText || r.FinishReason != "stop" || !r.HasUsage {
			t.Fatalf("tap read %+v", r)
		}
	})
}

func TestErrorBodySDK(t *testing.T) {
	t.Parallel()
	record := []byte(`{"run_id":"r-123","status":"terminated","reason":"cost_budget","recoverable":true}`)
	tests := []struct {
		desc     string
		kind     wire.ErrorKind
		status   int
		typ      string
		code     string
		record   []byte
		responds bool // use the Responses API instead of chat
	}{
		{"invalid request", wire.ErrInvalidRequest, 400, "invalid_request_error", "invalid_request", nil, false},
		{"authentication", wire.ErrAuthentication, 401, "authentication_error", "invalid_api_key", nil, true},
		{"policy denied", wire.ErrPolicyDenied, 403, "permission_error", "policy_denied", record, false},
		{"not found", wire.ErrNotFound, 404, "not_found_error", "not_found", nil, false},
		{"too large", wire.ErrTooLarge, 413, "invalid_request_error", "request_too_large", nil, true},
		{"budget", wire.ErrBudget, 429, "budget_exceeded", "rate_limit_exceeded", record, false},
		{"budget responses", wire.ErrBudget, 429, "budget_exceeded", "rate_limit_exceeded", record, true},
		{"bad gateway", wire.ErrBadGateway, 502, "server_error", "bad_gateway", nil, false},
		{"unavailable", wire.ErrUnavailable, 503, "server_error", "service_unavailable", nil, false},
		{"timeout", wire.ErrTimeout, 504, "server_error", "timeout", record, true},
		{"bad record left out", wire.ErrBudget, 429, "budget_exceeded", "rate_limit_exceeded", []byte(`{"run_id":`), false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			var codec wire.Codec = Chat{}
			if tc.responds {
				codec = Responses{}
			}
			msg := `run "r-123" ended: cost budget <$0.50> reached`
			body := codec.ErrorBody(tc.kind, msg, tc.record)
			if tc.kind.Status() != tc.status {
				t.Fatalf("status %d", tc.kind.Status())
			}
			client := serve(t, tc.status, "application/json", body)
			var err error
			if tc.responds {
				_, err = client.Responses.New(context.Background(), responsesParams)
			} else {
				_, err = client.Chat.Completions.New(context.Background(), chatParams)
			}
			var apiErr *oai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("not an *openai.Error: %v", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Type != tc.typ || apiErr.Code != tc.code || apiErr.Message != msg {
				t.Fatalf("got %d %q %q %q", apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Message)
			}
			var whole map[string]json.RawMessage
			if err := json.Unmarshal(body, &whole); err != nil {
				t.Fatal(err)
			}
			rec, has := whole["haltline"]
			switch {
			case json.Valid(tc.record) && (!has || string(rec) != string(tc.record)):
				t.Fatalf("record %s", rec)
			case !json.Valid(tc.record) && has:
				t.Fatalf("invalid record embedded: %s", body)
			}
		})
	}
}
