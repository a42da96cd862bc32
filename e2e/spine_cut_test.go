package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/runstate"
)

// 5c. A stream the upstream breaks off after three events, by a TCP reset
// or by ending its body before the provider's terminal event: the client
// gets the three events, the provider's error event and no clean end of the
// chunked body, so a raw HTTP reader and the official SDKs both raise an
// error; the run records the call as model_error with what was metered,
// and the call is settled (the run is not left deciding).
func TestSpineUpstreamCutsTheStream(t *testing.T) {
	t.Parallel()
	apis := []struct {
		desc, route, fixture string
		body                 []byte
		errEvent             string // how the provider's error event starts
		sdk                  func(g *app.Gateway) (events int, err error)
		// in and out are the tokens the stream's first three events
		// reported; -1 when they reported none (the reservation's worst
		// case is booked then).
		in, out int64
	}{
		{"openai chat", "/v1/chat/completions", "openai-chat/stream-text-include-usage.sse", spChatBody(true, ""),
			`data: {"error":{"message":"upstream stream ended before its terminal event","type":"server_error"`,
			func(g *app.Gateway) (int, error) {
				s := spOpenAI(g).Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the capital of Mexico?")}})
				return drain(s)
			}, -1, -1},
		{"openai responses", "/v1/responses", "openai-responses/stream-function-call.sse",
			[]byte(`{"model":"gpt-4o","input":"Weather in Paris?","stream":true}`),
			"event: error\ndata: {\"error\":{\"message\":\"upstream stream ended before its terminal event\",\"type\":\"server_error\"",
			func(g *app.Gateway) (int, error) {
				s := spOpenAI(g).Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-4o",
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")}})
				return drain(s)
			}, -1, -1},
		{"anthropic messages", "/v1/messages", "anthropic/stream-tool-use.sse", spMessagesBody(true),
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"upstream stream ended before its terminal event\"",
			func(g *app.Gateway) (int, error) {
				s := spAnthropic(g).Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4-0", MaxTokens: 256,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}})
				return drain(s)
			}, 377, 1},
	}
	for _, api := range apis {
		events := firstEvents(t, api.fixture, 3)
		sent := strings.Join(events, "")
		for _, reset := range []bool{true, false} {
			end := "reset"
			if !reset {
				end = "eof"
			}
			for _, client := range []string{"raw", "sdk"} {
				t.Run(api.desc+"/"+end+"/"+client, func(t *testing.T) {
					t.Parallel()
					up := newUpstream(t, cutStream(t, events, reset))
					g := startGateway(t, up.URL)
					if client == "sdk" {
						n, err := api.sdk(g)
						if err == nil {
							t.Fatalf("the SDK saw %d events and a clean end", n)
						}
						if n != 3 {
							t.Fatalf("the SDK saw %d events before its error %v, want 3", n, err)
						}
						return
					}
					hdr := map[string]string{"Authorization": "Bearer sk-agent-test", "Anthropic-Version": "2023-06-01"}
					resp, body, err := spPostCut(g, api.route, hdr, api.body)
					if err == nil {
						t.Fatalf("the client read a clean end of the body: %q", body)
					}
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("reading the body: %v, want an unexpected EOF", err)
					}
					if !bytes.HasPrefix(body, []byte(sent)) {
						t.Fatalf("client bytes:\n got %q\nwant the upstream's %q first", body, sent)
					}
					if rest := string(body[len(sent):]); !strings.HasPrefix(rest, api.errEvent) || !strings.HasSuffix(rest, "}\n\n") {
						t.Fatalf("after the upstream's events the client got %q, want the provider's error event", rest)
					}
					runID := spCheckRunHeaders(t, resp.Header, "1")
					rec := settledRecord(t, g, runID)
					if rec.Status != runstate.Ready || rec.AgentSteps != 0 || rec.ModelCalls != 1 {
						t.Fatalf("status %q agent_steps %d model_calls %d, want ready, no step, one call", rec.Status, rec.AgentSteps, rec.ModelCalls)
					}
					call := modelCallEvent(t, g, runID)
					if call.Error != runstate.ReasonModelError || !strings.Contains(call.Detail, "terminal event") {
						t.Fatalf("model call event %+v, want error %q", call, runstate.ReasonModelError)
					}
					if call.InputTokens != rec.InputTokens || call.OutputTokens != rec.OutputTokens {
						t.Fatalf("event tokens %d/%d, run counters %d/%d", call.InputTokens, call.OutputTokens, rec.InputTokens, rec.OutputTokens)
					}
					if api.in >= 0 && (rec.InputTokens != api.in || rec.OutputTokens != api.out) {
						t.Fatalf("settled %d in %d out, want what the stream reported: %d in %d out", rec.InputTokens, rec.OutputTokens, api.in, api.out)
					}
					if api.in < 0 && (rec.InputTokens <= 0 || rec.OutputTokens <= 0) {
						t.Fatalf("settled %d in %d out, want the reservation's worst case", rec.InputTokens, rec.OutputTokens)
					}
				})
			}
		}
	}
}

// A stream that ends cleanly is relayed byte for byte, with the clean end
// of its body, whatever the cut handling adds.
func TestSpineWholeStreamEndsCleanly(t *testing.T) {
	t.Parallel()
	stream := fixture(t, "openai-chat/stream-text-include-usage.sse")
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { writeSSE(w, stream) })
	g := startGateway(t, up.URL)
	_, body, err := spPostCut(g, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-agent-test"},
		spChatBody(true, `,"stream_options":{"include_usage":true}`))
	if err != nil || !bytes.Equal(body, stream) {
		t.Fatalf("%v; client bytes differ from the upstream's:\n got %q\nwant %q", err, body, stream)
	}
}

// drain reads an SDK's stream to its end: the events it yielded, and the
// error it ended with.
func drain(s interface {
	Next() bool
	Err() error
}) (int, error) {
	n := 0
	for s.Next() {
		n++
	}
	return n, s.Err()
}

// firstEvents is the first n events of a fixture's stream, pings left
// out (the SDKs skip them).
func firstEvents(t *testing.T, name string, n int) []string {
	var events []string
	for _, ev := range spEvents(fixture(t, name)) {
		if !strings.HasPrefix(ev, "event: ping") && len(events) < n {
			events = append(events, ev)
		}
	}
	return events
}

// cutStream answers with events as a chunked event stream, one chunk each,
// then ends the connection: with a TCP reset (reset), or with the clean end
// of the chunked body but no terminal event.
func cutStream(t *testing.T, events []string, reset bool) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, ev := range events {
			fmt.Fprintf(bw, "%x\r\n%s\r\n", len(ev), ev)
			_ = bw.Flush()
		}
		if reset {
			// Closing with a zero linger sends a reset, not a FIN.
			_ = conn.(*net.TCPConn).SetLinger(0)
			return
		}
		_, _ = bw.WriteString("0\r\n\r\n")
		_ = bw.Flush()
	}
}

// spPostCut is spPost that returns the body read so far and the error
// that ended the read, instead of failing on it.
func spPostCut(g *app.Gateway, route string, hdr map[string]string, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, gwURL(g)+route, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := spClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// modelCallEvent is the run's only model_call event, from the control plane.
func modelCallEvent(t *testing.T, g *app.Gateway, runID string) runstate.Event {
	t.Helper()
	var got struct {
		Events []runstate.Event `json:"events"`
	}
	getJSON(t, adminURL(g)+"/api/v1/runs/"+runID+"/events", &got)
	var calls []runstate.Event
	for _, ev := range got.Events {
		if ev.Type == runstate.EventModelCall {
			calls = append(calls, ev)
		}
	}
	if len(calls) != 1 {
		b, _ := json.Marshal(got.Events)
		t.Fatalf("%d model_call events, want 1: %s", len(calls), b)
	}
	return calls[0]
}

// The same cut through both front ends. A stream the upstream ends before
// its terminal event reaches the client as an error and is recorded as
// model_error by both. A reset reaches the ext_proc front end only as the
// end of Envoy's stream, which a client's hang-up ends alike: the client
// sees the reset (Envoy's), and the call is settled, but not recorded as a
// model error there.
func TestFrontEndsCutStream(t *testing.T) {
	t.Parallel()
	events := firstEvents(t, "anthropic/stream-tool-use.sse", 3)
	for _, fe := range frontEnds {
		for _, reset := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/reset=%v", fe, reset), func(t *testing.T) {
				t.Parallel()
				up := newUpstream(t, cutStream(t, events, reset))
				f := startFrontEnd(t, fe, up.URL)
				req, err := http.NewRequest(http.MethodPost, f.base+"/v1/messages", bytes.NewReader(spMessagesBody(true)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Api-Key", "sk-ant-agent-test")
				req.Header.Set("Anthropic-Version", "2023-06-01")
				resp, err := f.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("status %d, the client read a clean end of the body: %q", resp.StatusCode, b)
				}
				runID := resp.Header.Get("X-Run-Id")
				rec := settledRecord(t, f.Gateway, runID)
				if rec.Status != runstate.Ready || rec.AgentSteps != 0 || rec.InputTokens != 377 || rec.OutputTokens != 1 {
					t.Fatalf("status %q steps %d tokens %d/%d, want ready, no step, what the stream reported (377/1)",
						rec.Status, rec.AgentSteps, rec.InputTokens, rec.OutputTokens)
				}
				wantErr := runstate.ReasonModelError
				if fe == "extproc" && reset {
					wantErr = ""
				}
				if call := modelCallEvent(t, f.Gateway, runID); call.Error != wantErr {
					t.Fatalf("model call event error %q, want %q (%+v)", call.Error, wantErr, call)
				}
			})
		}
	}
}
