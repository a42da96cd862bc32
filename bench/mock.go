package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// runRole runs a re-executed harness binary as the mock upstream or the
// floor proxy. Each prints "listening ADDR" once it accepts connections and
// serves until SIGTERM or until its parent dies.
func runRole(role string, args []string) error {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	upstream := fs.String("upstream", "", "floor: the mock's base URL")
	var m mock
	fs.IntVar(&m.steps, "steps", 4, "mock: model calls per run")
	fs.IntVar(&m.chunks, "chunks", 50, "mock: content chunks per stream")
	fs.DurationVar(&m.gap, "chunk-gap", 0, "mock: pause between chunks")
	fs.DurationVar(&m.firstGap, "first-event-gap", 0, "mock: pause after a stream's first event")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var h http.Handler
	switch role {
	case "mock":
		h = m.handler()
	case "floor":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			return fmt.Errorf("floor needs -upstream URL, got %q", *upstream)
		}
		h = floorProxy(u)
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Printf("listening %s\n", ln.Addr())
	srv := &http.Server{Handler: h}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// floorProxy is the floor: the bare standard-library reverse proxy, with the
// same connection pool sizes as the gateway's upstream client so the two
// differ only in what they do per request.
func floorProxy(target *url.URL) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The body is read whole before forwarding, as the gateway
			// must read it to govern the call. Streamed through instead,
			// net/http's server closes it under the transport when the
			// upstream answers before the transport has seen its end,
			// and a few percent of fast streams then end in
			// "unexpected EOF" at the client.
			b, err := io.ReadAll(pr.In.Body)
			if err != nil {
				b = nil
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(b))
			pr.Out.ContentLength = int64(len(b))
		},
		Transport: &http.Transport{
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 512,
			IdleConnTimeout:     90 * time.Second,
			// Bodies pass as they are, as the gateway passes them.
			DisableCompression: true,
		},
		// Streams must pass chunk by chunk, as the gateway does.
		FlushInterval: -1,
	}
}

// mock is a fast model upstream speaking the OpenAI chat and Anthropic
// messages formats. It keeps no state: the step of a run is the number of
// tool results in the request, and the run's name is the request's "user"
// (OpenAI) or "metadata.user_id" (Anthropic), so tool-call ids are unique
// across runs and the arguments change at every step, as a real model's do.
type mock struct {
	steps    int
	chunks   int
	gap      time.Duration
	firstGap time.Duration // after a stream's first event (see options.firstGap)
	served   atomic.Int64
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func (m *mock) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, false) })
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, true) })
	// The harness compares this count before and after a phase with the
	// requests it sent: a gap means the proxy answered some calls itself.
	mux.HandleFunc("GET /_bench/served", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, m.served.Load())
	})
	return mux
}

func (m *mock) serve(w http.ResponseWriter, r *http.Request, anthropic bool) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := bytes.NewBuffer((*bp)[:0])
	if _, err := buf.ReadFrom(r.Body); err != nil {
		http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	*bp = body[:0]
	m.served.Add(1)

	var run []byte
	var step int
	if anthropic {
		run = stringField(body, `"user_id"`)
		step = bytes.Count(body, []byte(`"tool_use_id"`))
	} else {
		run = stringField(body, `"user"`)
		step = bytes.Count(body, []byte(`"tool_call_id"`))
	}
	// The run name is copied out: the pooled buffer is reused for the answer.
	var runBuf [96]byte
	run = append(runBuf[:0], run...)
	if len(run) == 0 {
		run = append(run, "anon"...)
	}
	// Roughly four bytes of JSON per token, as a tokenizer would find.
	in := len(body) / 4
	final := step >= m.steps-1
	stream := boolField(body, `"stream"`)
	w.Header().Set("X-Request-Id", "req_mock")
	switch {
	case stream && anthropic:
		m.streamAnthropic(w, in)
	case stream:
		m.streamOpenAI(w, in, bytes.Contains(body, []byte(`"include_usage":true`)))
	default:
		out := (*bp)[:0]
		if anthropic {
			out = anthropicMessage(out, run, step, in, final)
		} else {
			out = openAIChat(out, run, step, in, final)
		}
		*bp = out[:0]
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = w.Write(out)
	}
}

// stringField returns the string value of the first key in body, tolerating
// the blanks a re-encoder may add after the colon.
func stringField(body []byte, key string) []byte {
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return nil
	}
	rest := bytes.TrimLeft(body[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return nil
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return nil
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return nil
	}
	return rest[1 : 1+end]
}

func boolField(body []byte, key string) bool {
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(body[i+len(key):], " \t\r\n:")
	return bytes.HasPrefix(rest, []byte("true"))
}

func openAIChat(b, run []byte, step, in int, final bool) []byte {
	b = append(b, `{"id":"chatcmpl-mock","object":"chat.completion","created":1767225600,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant",`...)
	out := 24
	if final {
		out = 60
		b = append(b, `"content":"`...)
		b = append(b, finalText...)
		b = append(b, `","refusal":null},"logprobs":null,"finish_reason":"stop"}]`...)
	} else {
		b = append(b, `"content":null,"tool_calls":[`...)
		b = appendOpenAIToolCall(b, run, step)
		b = append(b, `],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}]`...)
	}
	cached := in / 2 / 64 * 64 // later steps re-read a cached prefix
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(in), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(in+out), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	b = append(b, `,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_mock"}`...)
	return b
}

// appendOpenAIToolCall writes the tool call the mock asks for at step k of
// run; the harness echoes exactly this in the next request (see bodies.go).
func appendOpenAIToolCall(b, run []byte, step int) []byte {
	b = append(b, `{"id":"call_`...)
	b = append(b, run...)
	b = append(b, '_')
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `","type":"function","function":{"name":"search_orders","arguments":"{\"page\":`...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `}"}}`...)
	return b
}

func anthropicMessage(b, run []byte, step, in int, final bool) []byte {
	b = append(b, `{"id":"msg_mock","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[`...)
	out := 24
	if final {
		out = 60
		b = append(b, `{"type":"text","text":"`...)
		b = append(b, finalText...)
		b = append(b, `"}],"stop_reason":"end_turn"`...)
	} else {
		b = appendAnthropicToolUse(b, run, step)
		b = append(b, `],"stop_reason":"tool_use"`...)
	}
	b = append(b, `,"stop_sequence":null,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(in), 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	b = append(b, `}}`...)
	return b
}

func appendAnthropicToolUse(b, run []byte, step int) []byte {
	b = append(b, `{"type":"tool_use","id":"toolu_`...)
	b = append(b, run...)
	b = append(b, '_')
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `","name":"search_orders","input":{"page":`...)
	b = strconv.AppendInt(b, int64(step), 10)
	b = append(b, `}}`...)
	return b
}

const finalText = "Three orders match: 1042 (shipped), 1077 (pending) and 1101 (refunded). Nothing else is open."

// streamWriter writes server-sent events, flushing each as a real provider
// does, with the optional pauses after the first event and between chunks.
type streamWriter struct {
	w        http.ResponseWriter
	f        *http.ResponseController
	gap      time.Duration
	firstGap time.Duration // paused once, after the first event
	b        []byte
}

func (m *mock) newStream(w http.ResponseWriter) *streamWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &streamWriter{w: w, f: http.NewResponseController(w), gap: m.gap, firstGap: m.firstGap, b: make([]byte, 0, 512)}
}

func (s *streamWriter) event(parts ...string) {
	s.b = s.b[:0]
	for _, p := range parts {
		s.b = append(s.b, p...)
	}
	s.b = append(s.b, "\n\n"...)
	_, _ = s.w.Write(s.b)
	_ = s.f.Flush()
	if s.firstGap > 0 {
		time.Sleep(s.firstGap)
		s.firstGap = 0
	}
	if s.gap > 0 {
		time.Sleep(s.gap)
	}
}

var words = []string{"Three ", "orders ", "match ", "the ", "query; ", "1042 ", "shipped, ", "1077 ", "pending, ", "1101 "}

func (m *mock) streamOpenAI(w http.ResponseWriter, in int, usage bool) {
	s := m.newStream(w)
	const head = `data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-mini","system_fingerprint":"fp_mock","choices":[`
	tail := `]}`
	if usage {
		tail = `],"usage":null}`
	}
	s.event(head, `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}`, tail)
	for i := 0; i < m.chunks; i++ {
		s.event(head, `{"index":0,"delta":{"content":"`, words[i%len(words)], `"},"logprobs":null,"finish_reason":null}`, tail)
	}
	s.event(head, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}`, tail)
	if usage {
		n := strconv.Itoa(in)
		o := strconv.Itoa(m.chunks)
		t := strconv.Itoa(in + m.chunks)
		s.event(head, `],"usage":{"prompt_tokens":`, n, `,"completion_tokens":`, o, `,"total_tokens":`, t,
			`,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`)
	}
	s.event("data: [DONE]")
}

func (m *mock) streamAnthropic(w http.ResponseWriter, in int) {
	s := m.newStream(w)
	n := strconv.Itoa(in)
	s.event("event: message_start\ndata: ", `{"type":"message_start","message":{"id":"msg_mock","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`, n, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`)
	s.event("event: content_block_start\ndata: ", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	s.event("event: ping\ndata: ", `{"type":"ping"}`)
	for i := 0; i < m.chunks; i++ {
		s.event("event: content_block_delta\ndata: ", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`, words[i%len(words)], `"}}`)
	}
	s.event("event: content_block_stop\ndata: ", `{"type":"content_block_stop","index":0}`)
	s.event("event: message_delta\ndata: ", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":`, strconv.Itoa(m.chunks), `}}`)
	s.event("event: message_stop\ndata: ", `{"type":"message_stop"}`)
}

// served reads the mock's count of model requests.
func servedCount(ctx context.Context, c *http.Client, base string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/_bench/served", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}
