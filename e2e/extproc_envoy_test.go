package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// envoyEmu stands in for Envoy with the ext_proc filter configured as in
// examples/envoy/envoy.yaml (request body BUFFERED, response body STREAMED,
// allow_mode_override, response.code_details requested) in front of one
// upstream cluster. It is an http.RoundTripper, so the official SDKs run
// through it unchanged. It speaks to the gateway over real gRPC, message by
// message in Envoy's order (the shapes of testdata/envoy-extproc), and
// applies the answers as Envoy does: header mutations (removals, then
// sets), body mutations, mode overrides, ImmediateResponse at any point.
type envoyEmu struct {
	client   extprocv3.ExternalProcessorClient
	upstream string // base URL of the cluster
	hc       *http.Client

	// What the filter sent, for the tests to check.
	responseChunks atomic.Int64 // streamed response body messages
	bodyMutations  atomic.Int64 // response chunks the gateway replaced
}

func newEnvoyEmu(t testing.TB, extprocAddr, upstream string) *envoyEmu {
	t.Helper()
	conn, err := grpc.NewClient(extprocAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &envoyEmu{client: extprocv3.NewExternalProcessorClient(conn), upstream: upstream,
		hc: &http.Client{Transport: &http.Transport{DisableCompression: true}}}
}

// emuHeaders is an HTTP header block as Envoy holds it: lower-case names,
// pseudo-headers included, in order.
type emuHeaders struct{ kv [][2]string }

func (h *emuHeaders) get(k string) string {
	for _, p := range h.kv {
		if p[0] == k {
			return p[1]
		}
	}
	return ""
}

func (h *emuHeaders) del(k string) {
	out := h.kv[:0]
	for _, p := range h.kv {
		if p[0] != k {
			out = append(out, p)
		}
	}
	h.kv = out
}

func (h *emuHeaders) set(k, v string) { h.del(k); h.kv = append(h.kv, [2]string{k, v}) }

func (h *emuHeaders) proto() *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for _, p := range h.kv {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: p[0], RawValue: []byte(p[1])})
	}
	return m
}

// apply is Envoy's order: removals first, then sets.
func (h *emuHeaders) apply(m *extprocv3.HeaderMutation) {
	for _, k := range m.GetRemoveHeaders() {
		h.del(strings.ToLower(k))
	}
	for _, o := range m.GetSetHeaders() {
		v := o.GetHeader().GetValue()
		if len(o.GetHeader().GetRawValue()) > 0 {
			v = string(o.GetHeader().GetRawValue())
		}
		h.set(strings.ToLower(o.GetHeader().GetKey()), v)
	}
}

func (h *emuHeaders) http() http.Header {
	out := http.Header{}
	for _, p := range h.kv {
		if !strings.HasPrefix(p[0], ":") {
			out.Add(p[0], p[1])
		}
	}
	return out
}

// emuMode is the filter's processing mode, overridable per exchange.
type emuMode struct {
	reqBody, respBody   filterv3.ProcessingMode_BodySendMode
	respHeadersSkip     bool
	reqBodyNone, noMore bool
}

func (m *emuMode) override(o *filterv3.ProcessingMode) {
	if o == nil {
		return
	}
	m.reqBody, m.respBody = o.GetRequestBodyMode(), o.GetResponseBodyMode()
	m.respHeadersSkip = o.GetResponseHeaderMode() == filterv3.ProcessingMode_SKIP
}

// errReset is what the client sees when Envoy resets a stream whose headers
// were already sent (an ImmediateResponse mid-stream).
var errReset = errors.New("envoy emulator: stream reset by the external processor")

func (e *envoyEmu) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	ps, err := e.client.Process(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	stream := newEmuStream(ps)
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	mode := emuMode{reqBody: filterv3.ProcessingMode_BUFFERED, respBody: filterv3.ProcessingMode_STREAMED}
	hdr := &emuHeaders{}
	hdr.set(":authority", req.URL.Host)
	hdr.set(":path", req.URL.RequestURI())
	hdr.set(":method", req.Method)
	hdr.set(":scheme", "http")
	for k, vs := range req.Header {
		for _, v := range vs {
			hdr.kv = append(hdr.kv, [2]string{strings.ToLower(k), v})
		}
	}
	if len(body) > 0 {
		hdr.set("content-length", strconv.Itoa(len(body)))
	}
	hdr.set("x-request-id", "0f8a5b7e-3c2d-4e1f-9a6b-5c4d3e2f1a0b")

	fail := func(err error) (*http.Response, error) { cancel(); return nil, err }
	// 1. Request headers.
	resp, err := stream.exchange(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdr.proto(), EndOfStream: len(body) == 0}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode.reqBody, ResponseBodyMode: mode.respBody},
	})
	if err != nil {
		return fail(err)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		cancel()
		return immediate(req, ir), nil
	}
	hdr.apply(resp.GetRequestHeaders().GetResponse().GetHeaderMutation())
	mode.override(resp.GetModeOverride())

	// 2. Request body, buffered whole.
	if len(body) > 0 && mode.reqBody != filterv3.ProcessingMode_NONE {
		resp, err = stream.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
		if err != nil {
			return fail(err)
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			cancel()
			return immediate(req, ir), nil
		}
		common := resp.GetRequestBody().GetResponse()
		hdr.apply(common.GetHeaderMutation())
		body = mutateBody(body, common.GetBodyMutation())
	}

	// 3. The router: upstream call bounded by the per-request timeout.
	// Meanwhile the filter still listens: an ImmediateResponse may come at
	// any time (the run was cancelled) and ends the exchange.
	upCtx, upCancel := context.WithCancel(ctx)
	if ms, err := strconv.Atoi(hdr.get("x-envoy-upstream-rq-timeout-ms")); err == nil && ms > 0 {
		upCancel()
		upCtx, upCancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	hdr.del("x-envoy-upstream-rq-timeout-ms")
	ureq, _ := http.NewRequestWithContext(upCtx, hdr.get(":method"), e.upstream+hdr.get(":path"), bytes.NewReader(body))
	ureq.Header = hdr.http()
	ureq.Header.Del("content-length")
	type upResult struct {
		res *http.Response
		err error
	}
	upc := make(chan upResult, 1)
	go func() { r, err := e.hc.Do(ureq); upc <- upResult{r, err} }()
	var ures *http.Response
	var uerr error
	select {
	case r := <-upc:
		ures, uerr = r.res, r.err
	case r := <-stream.ch:
		upCancel()
		go func() {
			if r := <-upc; r.res != nil {
				r.res.Body.Close()
			}
		}()
		_ = ps.CloseSend()
		cancel()
		if ir := r.m.GetImmediateResponse(); ir != nil {
			return immediate(req, ir), nil
		}
		return nil, fmt.Errorf("envoy emulator: spurious message while upstream: %v %v", r.m, r.err)
	}

	// 4. Response headers (Envoy's local reply when the upstream failed).
	rh := &emuHeaders{}
	details := "via_upstream"
	var ubody io.ReadCloser
	if uerr != nil {
		details = "upstream_reset_before_response_started{connection_failure}"
		status, text := 503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
		if errors.Is(uerr, context.DeadlineExceeded) {
			details, status, text = "upstream_response_timeout", 504, "upstream request timeout"
		}
		rh.set(":status", strconv.Itoa(status))
		rh.set("content-type", "text/plain")
		ubody = io.NopCloser(strings.NewReader(text))
	} else {
		rh.set(":status", strconv.Itoa(ures.StatusCode))
		for k, vs := range ures.Header {
			for _, v := range vs {
				rh.kv = append(rh.kv, [2]string{strings.ToLower(k), v})
			}
		}
		ubody = ures.Body
	}
	// finish drops the exchange (safe from any goroutine: it only cancels);
	// end half-closes the stream first, from the goroutine that owns it.
	var once sync.Once
	finish := func() { once.Do(func() { ubody.Close(); upCancel(); cancel() }) }
	end := func() { _ = ps.CloseSend(); finish() }
	if !mode.respHeadersSkip {
		attrs, _ := structpb.NewStruct(map[string]any{"response.code_details": details})
		resp, err = stream.exchange(&extprocv3.ProcessingRequest{
			Request:    &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: rh.proto()}},
			Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": attrs},
		})
		if err != nil {
			end()
			return nil, err
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			end()
			return immediate(req, ir), nil
		}
		rh.apply(resp.GetResponseHeaders().GetResponse().GetHeaderMutation())
		mode.override(resp.GetModeOverride())
	}
	status, _ := strconv.Atoi(rh.get(":status"))
	out := &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req, ContentLength: -1}

	// 5. Response body.
	switch {
	case mode.respHeadersSkip || mode.respBody == filterv3.ProcessingMode_NONE:
		out.Header = rh.http()
		out.Body = &emuBody{r: ubody, done: end}
		return out, nil
	case mode.respBody == filterv3.ProcessingMode_BUFFERED:
		b, rerr := io.ReadAll(ubody)
		if rerr != nil {
			end()
			return nil, rerr
		}
		resp, err = stream.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: true}}})
		end()
		if err != nil {
			return nil, err
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			return immediate(req, ir), nil
		}
		common := resp.GetResponseBody().GetResponse()
		rh.apply(common.GetHeaderMutation())
		b = mutateBody(b, common.GetBodyMutation())
		out.Header = rh.http()
		out.Header.Set("Content-Length", strconv.Itoa(len(b)))
		out.ContentLength = int64(len(b))
		out.Body = io.NopCloser(bytes.NewReader(b))
		return out, nil
	}
	// STREAMED: headers go downstream now, every upstream read is one
	// message (the last one flagged end of stream).
	out.Header = rh.http()
	out.Header.Del("Content-Length")
	pr, pw := io.Pipe()
	out.Body = &emuBody{r: pr, done: func() { pr.Close(); finish() }}
	type piece struct {
		data []byte
		eos  bool
		err  error
	}
	pieces := make(chan piece)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, rerr := ubody.Read(buf)
			p := piece{data: append([]byte(nil), buf[:n]...), eos: rerr != nil}
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				p.err = rerr
			}
			if n == 0 && !p.eos {
				continue
			}
			select {
			case pieces <- p:
			case <-ctx.Done():
				return
			}
			if p.eos {
				return
			}
		}
	}()
	go func() {
		defer end()
		for {
			var p piece
			select {
			case p = <-pieces:
			case <-stream.ch:
				// Unsolicited ImmediateResponse after the headers went out:
				// Envoy resets the stream.
				pw.CloseWithError(errReset)
				return
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			}
			if p.err != nil {
				// Envoy resets the downstream and closes the ext_proc stream.
				pw.CloseWithError(p.err)
				return
			}
			e.responseChunks.Add(1)
			resp, err := stream.exchange(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: p.data, EndOfStream: p.eos}}})
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if resp.GetImmediateResponse() != nil {
				pw.CloseWithError(errReset)
				return
			}
			chunk := p.data
			if bm := resp.GetResponseBody().GetResponse().GetBodyMutation(); bm != nil {
				e.bodyMutations.Add(1)
				chunk = mutateBody(chunk, bm)
			}
			if len(chunk) > 0 {
				if _, werr := pw.Write(chunk); werr != nil {
					return // the client went away: Envoy resets both sides
				}
			}
			if p.eos {
				pw.Close()
				return
			}
		}
	}()
	return out, nil
}

// emuStream reads the gateway's answers continuously, as the filter does,
// so that an unsolicited ImmediateResponse is seen while nothing is asked.
type emuStream struct {
	s  extprocv3.ExternalProcessor_ProcessClient
	ch chan emuRecv
}

type emuRecv struct {
	m   *extprocv3.ProcessingResponse
	err error
}

func newEmuStream(s extprocv3.ExternalProcessor_ProcessClient) *emuStream {
	es := &emuStream{s: s, ch: make(chan emuRecv, 4)}
	go func() {
		for {
			m, err := s.Recv()
			es.ch <- emuRecv{m, err}
			if err != nil {
				close(es.ch)
				return
			}
		}
	}()
	return es
}

// exchange sends one message and waits for its answer, as the filter does
// (one message outstanding at a time).
func (es *emuStream) exchange(m *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	if err := es.s.Send(m); err != nil {
		return nil, err
	}
	r, ok := <-es.ch
	if !ok {
		return nil, io.EOF
	}
	return r.m, r.err
}

func mutateBody(b []byte, m *extprocv3.BodyMutation) []byte {
	switch {
	case m == nil:
		return b
	case m.GetClearBody():
		return nil
	}
	if mb, ok := m.GetMutation().(*extprocv3.BodyMutation_Body); ok {
		return mb.Body
	}
	return b
}

// immediate is Envoy's local reply built from an ImmediateResponse.
func immediate(req *http.Request, ir *extprocv3.ImmediateResponse) *http.Response {
	h := &emuHeaders{}
	h.apply(ir.GetHeaders())
	status := int(ir.GetStatus().GetCode())
	hh := h.http()
	hh.Set("Content-Length", strconv.Itoa(len(ir.GetBody())))
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req, Header: hh,
		ContentLength: int64(len(ir.GetBody())), Body: io.NopCloser(bytes.NewReader(ir.GetBody()))}
}

// emuBody closes the exchange when the client is done with the body, as a
// downstream reset would.
type emuBody struct {
	r    io.Reader
	once sync.Once
	done func()
}

func (b *emuBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *emuBody) Close() error               { b.once.Do(b.done); return nil }
