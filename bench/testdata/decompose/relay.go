// The harness's build of the gateway in parts adds this file to package
// proxy (decompose.go, go build -overlay), and a call of relayAlone to the
// model route's handler. The product has neither.

package proxy

import (
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire/jsonscan"
)

// decomposeRelay makes the gateway in parts relay model calls without the
// pipeline when HALTLINE_DECOMPOSE=relay: -decompose measures what the
// fasthttp server and client cost alone, beside the gateway whole.
var decomposeRelay = os.Getenv("HALTLINE_DECOMPOSE") == "relay"

// relayAlone forwards the call as the gateway's relay does, with neither
// Begin nor Finish: no run, no policy, no metering, no store. It reports
// false when the provider has no fasthttp client (the call then goes
// through the pipeline as usual). A stream's body is relayed as read; the
// caller must not release body when *streaming is set.
func (s *Server) relayAlone(ctx *fasthttp.RequestCtx, received time.Time, body []byte, prov *config.Provider, release func(), streaming *bool) bool {
	up := s.fastFor(prov)
	if up == nil {
		return false
	}
	stream := false
	src := unsafe.String(unsafe.SliceData(body), len(body))
	if jsonscan.Object(src, jsonscan.SkipWS(src, 0), false, func(key string, _, v int) int {
		if key == "stream" {
			stream = strings.HasPrefix(src[v:], "true")
		}
		return jsonscan.SkipValue(src, v)
	}) < 0 {
		ctx.Error("request body is not a JSON object", fasthttp.StatusBadRequest)
		return true
	}
	t := &pipeline.Turn{Ctx: ctx, Timeout: s.o.Limits.UpstreamTimeout, UpstreamBody: body}
	start := time.Now()
	if stream {
		ans, err := s.sendStream(ctx, ctx, t, prov, up)
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			return true
		}
		ans.copyHeaders(&ctx.Response.Header)
		setOverhead(ctx, received, time.Since(start))
		ctx.SetStatusCode(ans.status)
		*streaming = true
		ctx.Response.SetBodyStream(&relayedStream{ans: ans, release: release}, -1)
		return true
	}
	resp, err := s.sendBuffered(ctx, ctx, t, prov, up)
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusBadGateway)
		return true
	}
	defer fasthttp.ReleaseResponse(resp)
	wait := time.Since(start)
	addRelayed(&ctx.Response.Header, &resp.Header)
	setOverhead(ctx, received, wait)
	ctx.SetStatusCode(resp.StatusCode())
	ctx.SetBody(resp.Body())
	return true
}

// relayedStream is an upstream stream's body as fasthttp's server reads
// it, chunked, each read flushed.
type relayedStream struct {
	ans     answer
	release func()
}

func (b *relayedStream) Read(p []byte) (int, error) { return b.ans.body.Read(p) }

func (b *relayedStream) Close() error {
	b.ans.body.Close()
	b.ans.free()
	b.release()
	return nil
}
