package proxy

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/config"
	"github.com/haltline/haltline/pipeline"
)

// readBackRounds runs a model call whose forwarded request offers the
// gateway's read tool: each round's answer is read whole (a stream through
// its turn, which holds all of it) and settled; while an answer calls the
// read tool, the pipeline answers it and the next round goes upstream.
// The client receives the last round's answer only, streamed or not, as
// one body: none of a round the gateway answered may reach it.
func (s *Server) readBackRounds(ctx *fasthttp.RequestCtx, t *pipeline.Turn, prov *config.Provider, up *fastUpstream, received time.Time) {
	bg := context.Background()
	var waited time.Duration // on the upstream, over every round
	for {
		watch := watchHangupAfter(ctx.Conn(), hangupWatchDelay, t.Abort)
		start := time.Now()
		ans, err := s.sendOpen(ctx, t, prov, up)
		firstByte := time.Since(start)
		if err != nil {
			watch.Stop()
			s.answerFinish(ctx, t, pipeline.Outcome{Err: err, UpstreamWait: firstByte}, received)
			return
		}
		out := pipeline.Outcome{Status: ans.status, FirstByte: firstByte}
		var body []byte
		cut := false
		if ans.status >= 200 && ans.status <= 299 && ans.eventStream {
			out.Streamed = true
			out.Err = holdStream(ans.body, t)
			cut = t.Cut()
		} else {
			body, out.Err = readBounded(ans.body, s.o.Limits.MaxResponseBytes)
			out.Body = body
		}
		ans.body.Close()
		watch.Stop()
		out.UpstreamWait = time.Since(start)
		waited += out.UpstreamWait
		if out.Err != nil && !out.Streamed {
			ans.free()
			out.Status, out.Body = 0, nil
			s.answerFinish(ctx, t, out, received)
			return
		}
		a := s.p.Finish(bg, t, out)
		if next := s.p.ReadBack(bg, t); next != nil {
			ans.free()
			t = next
			if t.Answer != nil {
				s.p.Finish(bg, t, pipeline.Outcome{})
				s.p.Headers(t, ctx.Response.Header.Set)
				setOverhead(ctx, received, waited)
				writeAnswer(ctx, t.Answer)
				return
			}
			s.p.Forwarding(t, func(k, v string) { ctx.Request.Header.Set(k, v) })
			continue
		}
		if a != nil {
			ans.free()
			s.p.Headers(t, ctx.Response.Header.Set)
			setOverhead(ctx, received, waited)
			writeAnswer(ctx, a)
			return
		}
		if out.Streamed {
			body = t.Release()
			if cut {
				body = append(body, t.CutEvent()...)
			}
		}
		s.writeWhole(ctx, t, ans, body, received, waited)
		return
	}
}

// holdStream reads a stream to its end through t, which holds all of it
// (Turn.Feed, for a call that offers the read tool), and returns the
// upstream's error, if any but its end.
func holdStream(r io.Reader, t *pipeline.Turn) error {
	buf := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(buf)
	for {
		n, err := r.Read(*buf)
		if n > 0 {
			t.Feed((*buf)[:n])
		}
		if err != nil {
			t.End()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
