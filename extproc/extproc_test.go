package extproc_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
)

// The shared table of cases (both front ends, through an Envoy emulator)
// lives in e2e/extproc_frontends_test.go; these tests pin the wire shapes
// against Envoy's own messages and measure the round trip.

func readFixture(t testing.TB, name string, m proto.Message) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "envoy-extproc", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// Every fixture is a valid envoy.service.ext_proc.v3 message (proto3 JSON),
// and passes the API's validation rules.
func TestFixturesAreExtProcMessages(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(filepath.Join("testdata", "envoy-extproc"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			t.Parallel()
			var m interface {
				proto.Message
				ValidateAll() error
			} = &extprocv3.ProcessingResponse{}
			if strings.HasSuffix(e.Name(), ".request.json") {
				m = &extprocv3.ProcessingRequest{}
			}
			readFixture(t, e.Name(), m)
			if err := m.ValidateAll(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func startGateway(t testing.TB, mod ...func(*config.Config)) *app.Gateway {
	t.Helper()
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen, cfg.ExtProcListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = t.TempDir()
	for _, m := range mod {
		m(&cfg)
	}
	g, err := app.Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return g
}

func dial(t testing.TB, addr string) extprocv3.ExternalProcessorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// Envoy's recorded sequence (fixtures 01, 03, 05, 07, 09) gets the answers
// the gateway owes it: continue with the model call's processing mode, the
// body untouched (the client asked for usage itself), run headers on the
// response, every chunk passed as it was.
func TestRecordedEnvoySequence(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	stream, err := dial(t, g.ExtProcAddr).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		desc    string
		fixture string
		check   func(t *testing.T, r *extprocv3.ProcessingResponse)
	}{
		{desc: "request headers", fixture: "01-request-headers.request.json", check: func(t *testing.T, r *extprocv3.ProcessingResponse) {
			if r.GetRequestHeaders() == nil || r.GetModeOverride().GetRequestBodyMode().String() != "BUFFERED" {
				t.Fatalf("answer %v", r)
			}
		}},
		{desc: "request body", fixture: "03-request-body.request.json", check: func(t *testing.T, r *extprocv3.ProcessingResponse) {
			c := r.GetRequestBody().GetResponse()
			if r.GetRequestBody() == nil || c.GetBodyMutation() != nil {
				t.Fatalf("answer %v", r)
			}
			want := map[string]bool{"x-envoy-upstream-rq-timeout-ms": true}
			for _, h := range c.GetHeaderMutation().GetSetHeaders() {
				delete(want, h.GetHeader().GetKey())
			}
			if len(want) > 0 {
				t.Fatalf("headers not set: %v in %v", want, c.GetHeaderMutation())
			}
		}},
		{desc: "response headers", fixture: "05-response-headers.request.json", check: func(t *testing.T, r *extprocv3.ProcessingResponse) {
			set := map[string]string{}
			for _, h := range r.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			if set["x-run-id"] == "" || set["x-run-state"] != "deciding" {
				t.Fatalf("run headers %v", set)
			}
		}},
		{desc: "response chunk", fixture: "07-response-body.request.json", check: func(t *testing.T, r *extprocv3.ProcessingResponse) {
			if r.GetResponseBody() == nil || r.GetResponseBody().GetResponse().GetBodyMutation() != nil {
				t.Fatalf("answer %v", r)
			}
		}},
		{desc: "last chunk", fixture: "09-response-body-last.request.json", check: func(t *testing.T, r *extprocv3.ProcessingResponse) {
			if r.GetResponseBody() == nil {
				t.Fatalf("answer %v", r)
			}
		}},
	} {
		var req extprocv3.ProcessingRequest
		readFixture(t, step.fixture, &req)
		if err := stream.Send(&req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: %v", step.desc, err)
		}
		if err := resp.ValidateAll(); err != nil {
			t.Fatalf("%s: invalid answer: %v", step.desc, err)
		}
		step.check(t, resp)
	}
	_ = stream.CloseSend()
}

func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// BenchmarkRoundTrip measures one model call through the ext_proc server
// over loopback gRPC, as Envoy drives it, with the embedded policies and the
// durable store: "request" is the admission part
// (request headers + buffered body → Begin, mutations), "call" adds the
// non-streamed response (headers + body → Finish, settle, record).
func BenchmarkRoundTrip(b *testing.B) {
	g := startGateway(b, func(c *config.Config) { c.Log.Level = "error" })
	client := dial(b, g.ExtProcAddr)
	body := []byte(`{"model":"gpt-4o-mini","max_completion_tokens":64,"messages":[{"role":"user","content":"What is the capital of Mexico?"}]}`)
	answer := []byte(`{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Mexico City."},"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":3,"total_tokens":17}}`)
	attrs, _ := structpb.NewStruct(map[string]any{"response.code_details": "via_upstream"})
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":authority", "gateway.internal:8080", ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "http",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)), "authorization", "Bearer sk-bench")}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(
			":status", "200", "content-type", "application/json")}},
			Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": attrs}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: answer, EndOfStream: true}}},
	}
	// "transport" is a request the gateway does not govern (one headers
	// message, skipped): the gRPC round trip alone, for comparison.
	skip := []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(":path", "/static/logo.png", ":method", "GET"), EndOfStream: true}}}}
	for _, bc := range []struct {
		desc string
		msgs []*extprocv3.ProcessingRequest
	}{{"transport", skip}, {"request", msgs[:2]}, {"call", msgs}} {
		b.Run(bc.desc, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				stream, err := client.Process(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range bc.msgs {
					if err := stream.Send(m); err != nil {
						b.Fatal(err)
					}
					r, err := stream.Recv()
					if err != nil {
						b.Fatal(err)
					}
					if r.GetImmediateResponse() != nil {
						b.Fatalf("refused: %s", r.GetImmediateResponse().GetBody())
					}
				}
				_ = stream.CloseSend()
				cancel()
			}
		})
	}
}
