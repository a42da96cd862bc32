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
// the call's time (DESIGN §5).
const (
	baseBackoff = 200 * time.Millisecond
	maxBackoff  = 5 * time.Second
)

// send forwards the turn's body upstream, retrying timeouts, 5xx, resets
// and 429 (honouring Retry-After) within the call's timeout; never other
// 4xx. A returned response has its body open.
func (s *Server) send(ctx context.Context, in *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	callDeadline, _ := ctx.Deadline()
	url := prov.BaseURL + string(in.Path())
	if q := in.URI().QueryString(); len(q) > 0 {
		url += "?" + string(q)
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(t.UpstreamBody))
		if err != nil {
			cancel()
			return nil, err
		}
		s.upstreamHeaders(req.Header, &in.Request.Header, prov)
		resp, err := s.client.Do(req)
		retry, wait := retryable(resp, err)
		if !retry || attempt >= s.o.Retries {
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		if wait == 0 {
			wait = min(maxBackoff, baseBackoff<<attempt) + time.Duration(rand.Int64N(int64(baseBackoff)))
		}
		if time.Until(callDeadline) < wait+baseBackoff {
			// No room for another try: give what we have.
			if err != nil {
				cancel()
				return nil, err
			}
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}
		if resp != nil {
			_, _ = readBounded(resp.Body, 1<<20)
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func retryable(resp *http.Response, err error) (bool, time.Duration) {
	if err != nil {
		// Cancellation by the client or the run is final; timeouts of one
		// attempt and resets are worth another try.
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded), 0
	}
	switch {
	case resp.StatusCode == 429:
		if resp.Header.Get("x-should-retry") == "false" {
			return false, 0
		}
		return true, retryAfter(resp.Header.Get("Retry-After"))
	case resp.StatusCode >= 500:
		if resp.Header.Get("x-should-retry") == "false" {
			return false, 0
		}
		return true, retryAfter(resp.Header.Get("Retry-After"))
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

// upstreamHeaders copies the agent's headers, less hop-by-hop, the run
// headers and, with a gateway-held key, the agent's credential.
func (s *Server) upstreamHeaders(dst http.Header, src *fasthttp.RequestHeader, prov *config.Provider) {
	src.VisitAll(func(k, v []byte) {
		name := http.CanonicalHeaderKey(string(k))
		switch {
		case hopHeaders[name], name == "Host", name == "Accept-Encoding",
			strings.HasPrefix(name, "X-Run-"), name == "X-Session-Id", name == "X-Agent-Id",
			name == "X-Parent-Run-Id", name == "X-Task-Type":
			return
		case prov.APIKey != "" && (name == "Authorization" || name == "X-Api-Key"):
			return
		}
		dst.Add(name, string(v))
	})
	if prov.APIKey != "" {
		if prov == &s.o.Anthropic {
			dst.Set("X-Api-Key", prov.APIKey)
			if dst.Get("Anthropic-Version") == "" {
				dst.Set("Anthropic-Version", "2023-06-01")
			}
		} else {
			dst.Set("Authorization", "Bearer "+prov.APIKey)
		}
	}
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
