package anthropic

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/haltline/haltline/wire"
)

// server serves h on 127.0.0.1 only.
func server(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func client(srv *httptest.Server) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("x"), option.WithMaxRetries(0))
}

// syntheticServer answers every Messages call with SyntheticFinal, reading
// the SDK's own request with ParseRequest to learn model and stream.
func syntheticServer(t *testing.T, text string) *httptest.Server {
	return server(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := Messages{}.ParseRequest(body)
		if err != nil {
			t.Errorf("ParseRequest(SDK request): %v", err)
		}
		ct, out := Messages{}.SyntheticFinal(&req, text)
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(out)
	})
}

var params = anthropic.MessageNewParams{
	Model:     anthropic.Model("claude-sonnet-4-5"),
	MaxTokens: 64,
	Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
}

func TestSyntheticFinalWithSDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		text string
	}{
		{"plain", "Budget reached. Partial answer: 42."},
		{"escapes and unicode", "line one\nline \"two\"\t\\ é 😀 </script>\x01"},
		{"empty", ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			srv := syntheticServer(t, tc.text)
			c := client(srv)

			msg, err := c.Messages.New(context.Background(), params)
			if err != nil {
				t.Fatal(err)
			}
			checkMessage(t, "New", msg, tc.text)

			stream := c.Messages.NewStreaming(context.Background(), params)
			var acc anthropic.Message
			for stream.Next() {
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			checkMessage(t, "NewStreaming", &acc, tc.text)
		})
	}
}

func checkMessage(t *testing.T, how string, msg *anthropic.Message, text string) {
	t.Helper()
	var got strings.Builder
	for _, b := range msg.Content {
		got.WriteString(b.Text)
	}
	want := strings.ToValidUTF8(text, "\uFFFD")
	if got.String() != want || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Errorf("%s: text %q stop %q, want %q end_turn", how, got.String(), msg.StopReason, want)
	}
	if !strings.HasPrefix(msg.ID, "msg_haltline_") || len(msg.ID) != len("msg_haltline_")+24 {
		t.Errorf("%s: id %q", how, msg.ID)
	}
	if msg.Model != "claude-sonnet-4-5" || msg.Usage.InputTokens != 0 || msg.Usage.OutputTokens != 0 {
		t.Errorf("%s: model %q usage %+v", how, msg.Model, msg.Usage)
	}
}

// The synthetic answer reads back through the codec itself as a final answer.
func TestSyntheticFinalReadsBack(t *testing.T) {
	t.Parallel()
	const text = "Stopped: step budget reached."
	for _, stream := range []bool{false, true} {
		req := &wire.Request{Model: "m", Stream: stream}
		ct, body := Messages{}.SyntheticFinal(req, text)
		var got wire.Response
		if stream {
			if ct != "text/event-stream" {
				t.Errorf("content type %q", ct)
			}
			_, got = feed(t, body, whole)
		} else {
			if ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			var err error
			if got, err = (Messages{}).ParseResponse(body); err != nil {
				t.Fatal(err)
			}
		}
		if got.FinishReason != "stop" || got.Text != text || got.TextHash != wire.TextHash(text) || got.Usage != (wire.Usage{}) || !got.HasUsage {
			t.Errorf("stream=%v: %+v", stream, got)
		}
	}
}

func TestErrorBodyWithSDK(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		desc string
		kind wire.ErrorKind
		typ  string
	}{
		{"invalid request", wire.ErrInvalidRequest, "invalid_request_error"},
		{"authentication", wire.ErrAuthentication, "authentication_error"},
		{"policy denied", wire.ErrPolicyDenied, "permission_error"},
		{"not found", wire.ErrNotFound, "not_found_error"},
		{"too large", wire.ErrTooLarge, "request_too_large"},
		{"budget", wire.ErrBudget, "rate_limit_error"},
		{"bad gateway", wire.ErrBadGateway, "api_error"},
		{"unavailable", wire.ErrUnavailable, "overloaded_error"},
		{"timeout", wire.ErrTimeout, "timeout_error"},
	}
	record := []byte(`{"run_id":"r-1","status":"terminated","reason":"max_steps"}`)
	for _, tc := range kinds {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			msg := "haltline: " + tc.desc + ` "quoted"`
			body := Messages{}.ErrorBody(tc.kind, msg, record)
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("x-should-retry", "false")
				w.WriteHeader(tc.kind.Status())
				_, _ = w.Write(body)
			})
			c := client(srv)
			_, err := c.Messages.New(context.Background(), params)
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *anthropic.Error", err)
			}
			if apiErr.StatusCode != tc.kind.Status() || apiErr.Message != msg || string(apiErr.Type()) != tc.typ {
				t.Errorf("status %d message %q type %q, want %d %q %q", apiErr.StatusCode, apiErr.Message, apiErr.Type(), tc.kind.Status(), msg, tc.typ)
			}
			if raw := apiErr.RawJSON(); !strings.Contains(raw, `"haltline":{"run_id":"r-1"`) {
				t.Errorf("record missing from %s", raw)
			}
		})
	}
}

func TestErrorBodyRecord(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc   string
		record []byte
		want   string
	}{
		{"no record", nil, `{"type":"error","error":{"type":"rate_limit_error","message":"m\n"}}`},
		{"record", []byte(`{"a":1}`), `{"type":"error","error":{"type":"rate_limit_error","message":"m\n"},"haltline":{"a":1}}`},
		{"broken record kept as a string", []byte(`{"a":`), `{"type":"error","error":{"type":"rate_limit_error","message":"m\n"},"haltline":"{\"a\":"}`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			if got := string(Messages{}.ErrorBody(wire.ErrBudget, "m\n", tc.record)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
