package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
)

// Retry backoff: min(maxBackoff, base·2^k + jitter), only while it fits in
// the call's time (docs/design.md §5).
const (
	baseBackoff = 200 * time.Millisecond
	maxBackoff  = 5 * time.Second
)

// tryFunc makes one attempt upstream and reports its status and a reader
// of its headers, or its error.
type tryFunc func() (status int, header func(string) string, err error)

// withRetries runs try, retrying timeouts, 5xx, resets and 429 (honouring
// Retry-After) while another try fits before the call's deadline; never
// other 4xx. discard drops a failed attempt's response before the next
// try. A nil error means the last attempt's response is the answer.
func withRetries(ctx context.Context, callDeadline time.Time, retries int, try tryFunc, discard func()) error {
	for attempt := 0; ; attempt++ {
		status, header, err := try()
		retry, wait := retryable(status, header, err)
		if !retry || attempt >= retries {
			return err
		}
		if wait == 0 {
			wait = min(maxBackoff, baseBackoff<<attempt) + time.Duration(rand.Int64N(int64(baseBackoff)))
		}
		if time.Until(callDeadline) < wait+baseBackoff {
			return err // no room for another try: give what we have
		}
		if err == nil {
			discard()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// upstreamURL is the provider's URL for the path (and query) received.
func upstreamURL(prov *config.Provider, in *fasthttp.RequestCtx) string {
	url := prov.BaseURL + string(in.Path())
	if q := in.URI().QueryString(); len(q) > 0 {
		url += "?" + string(q)
	}
	return url
}

// send forwards the turn's body upstream with net/http, for a call whose
// answer may be a stream.
func (s *Server) send(ctx context.Context, in *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider) (answer, error) {
	resp, err := s.sendHTTP(ctx, in, t, prov)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, eventStream: isEventStream(resp.Header), body: resp.Body,
		copyHeaders: func(dst *fasthttp.ResponseHeader) { copyHeaders(dst, resp.Header) }, free: func() {}}, nil
}

// sendHTTP sends with net/http; a returned response has its body open.
func (s *Server) sendHTTP(ctx context.Context, in *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	deadline, _ := ctx.Deadline()
	url := upstreamURL(prov, in)
	var resp *http.Response
	err := withRetries(ctx, deadline, s.o.Retries, func() (int, func(string) string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(t.UpstreamBody))
		if err != nil {
			return 0, nil, err
		}
		upstreamHeaders(&in.Request.Header, prov, s.isAnthropic(prov), addHTTPHeader(req.Header))
		if resp, err = s.client.Do(req); err != nil {
			return 0, nil, err
		}
		return resp.StatusCode, resp.Header.Get, nil
	}, func() {
		_, _ = readBounded(resp.Body, 1<<20)
		resp.Body.Close()
	})
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// sendBuffered forwards the turn's body upstream for a call that asked for
// no stream, with the provider's fasthttp client: the answer is read whole.
// The caller releases the response.
func (s *Server) sendBuffered(ctx context.Context, in *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider, up *fastUpstream) (*fasthttp.Response, error) {
	resp, _, err := s.sendFast(ctx, in, t, prov, func(deadline time.Time, req *fasthttp.Request, resp *fasthttp.Response) (*fastStream, error) {
		return nil, up.do(ctx, deadline, req, resp)
	})
	return resp, err
}

// sendStream forwards the turn's body upstream for a call that asked for a
// stream, with the provider's fasthttp client for streams: the answer's
// body is read as it arrives.
func (s *Server) sendStream(ctx context.Context, in *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider, up *fastUpstream) (answer, error) {
	resp, body, err := s.sendFast(ctx, in, t, prov, func(deadline time.Time, req *fasthttp.Request, resp *fasthttp.Response) (*fastStream, error) {
		return up.doStream(ctx, deadline, req, resp)
	})
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode(), eventStream: bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")),
		body: body, copyHeaders: func(dst *fasthttp.ResponseHeader) { addRelayed(dst, &resp.Header) },
		free: func() { fasthttp.ReleaseResponse(resp) }}, nil
}

// sendFast makes the attempts of a call with a fasthttp client (do), the
// call's timeout being the connection's deadline rather than a context of
// its own (a timer and two registrations per call). A failed attempt's
// streamed body is closed before the next.
func (s *Server) sendFast(ctx context.Context, in *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider,
	do func(deadline time.Time, req *fasthttp.Request, resp *fasthttp.Response) (*fastStream, error)) (*fasthttp.Response, *fastStream, error) {
	deadline := time.Now().Add(t.Timeout)
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(http.MethodPost)
	req.SetRequestURI(upstreamURL(prov, in))
	// The agent's header bytes are copied as they are: fasthttp read them
	// normalised, and a string per header would be garbage.
	upstreamHeaders(&in.Request.Header, prov, s.isAnthropic(prov), req.Header.AddBytesKV)
	req.SetBodyRaw(t.UpstreamBody)
	resp := fasthttp.AcquireResponse()
	var body *fastStream
	err := withRetries(ctx, deadline, s.o.Retries, func() (int, func(string) string, error) {
		var err error
		if body, err = do(deadline, req, resp); err != nil {
			return 0, nil, err
		}
		return resp.StatusCode(), func(k string) string { return string(resp.Header.Peek(k)) }, nil
	}, func() {
		if body != nil {
			body.Close()
		}
	})
	if err != nil {
		if body != nil {
			body.Close()
		}
		fasthttp.ReleaseResponse(resp)
		return nil, nil, err
	}
	return resp, body, nil
}

func retryable(status int, header func(string) string, err error) (bool, time.Duration) {
	if err != nil {
		// Cancellation by the client or the run is final; timeouts of one
		// attempt and resets are worth another try.
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded), 0
	}
	if status == 429 || status >= 500 {
		if header(pipeline.HeaderShouldRetry) == "false" {
			return false, 0
		}
		return true, retryAfter(header("Retry-After"))
	}
	return false, 0
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func (s *Server) isAnthropic(prov *config.Provider) bool { return prov == &s.o.Anthropic }

// upstreamHeaders hands add the agent's headers, less hop-by-hop, the run
// headers and, with a gateway-held key, the agent's credential; then the
// gateway's credential. fasthttp gives header names in canonical form.
func upstreamHeaders(src *fasthttp.RequestHeader, prov *config.Provider, anthropic bool, add func(k, v []byte)) {
	for k, v := range src.All() {
		if skipUpstream(k, prov.APIKey != "") {
			continue
		}
		add(k, v)
	}
	if prov.APIKey != "" {
		if anthropic {
			add([]byte("X-Api-Key"), []byte(prov.APIKey))
			if len(src.Peek("Anthropic-Version")) == 0 {
				add([]byte("Anthropic-Version"), []byte("2023-06-01"))
			}
		} else {
			add([]byte("Authorization"), []byte("Bearer "+prov.APIKey))
		}
	}
}

// addHTTPHeader is upstreamHeaders' add for a net/http request (which
// canonicalises the key as the header was before fasthttp read it).
func addHTTPHeader(h http.Header) func(k, v []byte) {
	return func(k, v []byte) { h.Add(string(k), string(v)) }
}

// skipUpstream reports whether the agent's header k stays at the gateway.
func skipUpstream(k []byte, gatewayKey bool) bool {
	switch string(k) {
	case "Host", "Accept-Encoding":
		return true
	case "Authorization", "X-Api-Key":
		return gatewayKey
	}
	return hopHeaders[string(k)] || pipeline.IsRunHeader(string(k))
}

// cancelOnClose releases the call's timeout when the body is done.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
