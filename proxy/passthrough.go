package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire"
)

// passThrough forwards any other /v1/* request (models, embeddings, files,
// count_tokens …) to the provider the request is meant for, unchanged.
func (s *Server) passThrough(ctx *fasthttp.RequestCtx) {
	isAnthropic := ctx.Request.Header.Peek("anthropic-version") != nil
	prov := &s.o.OpenAI
	if isAnthropic {
		prov = &s.o.Anthropic
	}
	codec := codecFor(string(ctx.Path()), isAnthropic)
	if _, ok := s.credential(ctx); !ok {
		writeAnswer(ctx, &pipeline.Answer{Status: 401, ContentType: "application/json",
			Body: codec.ErrorBody(wire.ErrAuthentication, "unknown API key", nil)})
		return
	}
	url := prov.BaseURL + string(ctx.Path())
	if q := ctx.URI().QueryString(); len(q) > 0 {
		url += "?" + string(q)
	}
	// The body is read before the hang-up watch starts: both read the socket.
	raw, err := readBody(ctx, s.o.Limits.MaxBodyBytes)
	if err != nil {
		refuseBody(ctx, codec, err)
		return
	}
	callCtx, cancel := context.WithTimeout(context.Background(), s.o.Limits.UpstreamTimeout)
	watch := watchHangupAfter(ctx.Conn(), hangupWatchDelay, cancel)
	var body io.Reader
	if len(raw) > 0 {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(callCtx, string(ctx.Method()), url, body)
	if err != nil {
		watch.Stop()
		cancel()
		writeAnswer(ctx, &pipeline.Answer{Status: 400, ContentType: "application/json",
			Body: codec.ErrorBody(wire.ErrInvalidRequest, "bad request", nil)})
		return
	}
	upstreamHeaders(&ctx.Request.Header, prov, s.isAnthropic(prov), addHTTPHeader(req.Header))
	resp, err := s.client.Do(req)
	if err != nil {
		watch.Stop()
		cancel()
		kind := wire.ErrBadGateway
		if callCtx.Err() == context.DeadlineExceeded {
			kind = wire.ErrTimeout
		}
		writeAnswer(ctx, &pipeline.Answer{Status: kind.Status(), ContentType: "application/json",
			Body: codec.ErrorBody(kind, "upstream unreachable", nil)})
		return
	}
	copyHeaders(&ctx.Response.Header, resp.Header)
	ctx.SetStatusCode(resp.StatusCode)
	if isEventStream(resp.Header) {
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer cancel()
			defer watch.Stop()
			defer resp.Body.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := resp.Body.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		return
	}
	b, err := readBounded(resp.Body, s.o.Limits.MaxResponseBytes)
	resp.Body.Close()
	watch.Stop()
	cancel()
	if err != nil {
		ctx.Response.Reset()
		writeAnswer(ctx, &pipeline.Answer{Status: 502, ContentType: "application/json",
			Body: codec.ErrorBody(wire.ErrBadGateway, err.Error(), nil)})
		return
	}
	ctx.SetBody(b)
}
