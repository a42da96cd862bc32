package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haltline/haltline/app"
	"github.com/haltline/haltline/config"
)

// BenchmarkGatewayCall is one model call through the whole gateway on
// loopback — client, gateway (every feature on, embedded store) and mock
// upstream in this process — so ns/op is the sum of the three; compare it
// between commits, not with the harness. Each run is 4 calls long.
func BenchmarkGatewayCall(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-b","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Mexico City."},"finish_reason":"stop"}],"usage":{"prompt_tokens":420,"completion_tokens":4,"total_tokens":424}}`)
	stream := []byte("data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Mexico City.\"},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":420,\"completion_tokens\":4,\"total_tokens\":424}}\n\ndata: [DONE]\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	defer up.Close()
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Providers.OpenAI.BaseURL, cfg.Providers.Anthropic.BaseURL = up.URL, up.URL
	cfg.Providers.OpenAI.APIKeyEnv, cfg.Providers.Anthropic.APIKeyEnv = "", ""
	cfg.Store.DataDir = b.TempDir()
	g, err := app.Start(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	}()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	// parallel: 8 callers at once (throughput); one: a single caller
	// (latency, compare with direct: the mock without the gateway). The
	// system prompt makes a 2 KB or a 200 KB request (the harness's two
	// sizes).
	for _, bc := range []struct {
		name     string
		stream   bool
		parallel bool
		base     string
		repeat   int
	}{
		{"chat-2KB", false, true, "http://" + g.DataAddr, 50},
		{"chat-2KB-stream", true, true, "http://" + g.DataAddr, 50},
		{"chat-2KB-one", false, false, "http://" + g.DataAddr, 50},
		{"chat-2KB-one-direct", false, false, up.URL, 50},
		{"chat-2KB-stream-one", true, false, "http://" + g.DataAddr, 50},
		{"chat-2KB-stream-one-direct", true, false, up.URL, 50},
		{"chat-200KB-one", false, false, "http://" + g.DataAddr, 6000},
		{"chat-200KB-one-direct", false, false, up.URL, 6000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			system := bytes.Repeat([]byte("You are the order desk assistant. "), bc.repeat)
			body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","stream":%t,"max_tokens":256,"messages":[{"role":"system","content":"%s"},{"role":"user","content":"What is the capital of Mexico?"}]}`, bc.stream, system)
			var seq, overheadUs atomic.Int64
			call := func() {
				n := seq.Add(1)
				req, _ := http.NewRequest(http.MethodPost, bc.base+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk-agent-test")
				req.Header.Set("X-Run-Id", fmt.Sprintf("bench-%s-%d", bc.name, n/4))
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				if ms, err := strconv.ParseFloat(resp.Header.Get("X-Haltline-Overhead-Ms"), 64); err == nil {
					overheadUs.Add(int64(ms * 1000))
				}
			}
			defer func() {
				if bc.base != up.URL {
					b.ReportMetric(float64(overheadUs.Load())/float64(seq.Load()), "overhead-µs/op")
				}
			}()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			if !bc.parallel {
				for b.Loop() {
					call()
				}
				return
			}
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call()
				}
			})
		})
	}
}
