package proxy

import (
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
func (s *Server) readBackRounds(ctx *fasthttp.RequestCtx, x *pipeline.Exchange, prov *config.Provider, up *fastUpstream, received time.Time) {
	for {
		watch := watchHangupAfter(ctx.Conn(), hangupWatchDelay, x.Abort)
		ans, err := s.sendOpen(ctx, x.Turn(), prov, up)
		if err != nil {
			watch.Stop()
			s.reply(ctx, x, x.Finish(nil, err), received)
			return
		}
		var body []byte
		streamed := x.Respond(ans.status, ans.eventStream)
		if streamed {
			err = holdStream(ans.body, x)
		} else {
			body, err = readBounded(ans.body, s.o.Limits.MaxResponseBytes)
		}
		ans.body.Close()
		watch.Stop()
		rep := x.Finish(body, err)
		if err != nil && !streamed {
			ans.free()
			s.reply(ctx, x, rep, received)
			return
		}
		if next, answered := x.Next(); next {
			ans.free()
			if answered != nil {
				s.reply(ctx, x, *answered, received)
				return
			}
			x.Forward(ctx.Request.Header.Set)
			continue
		}
		if streamed {
			body = rep.Tail
			if rep.Cut {
				body = append(body, x.CutEvent()...)
			}
		}
		s.writeWhole(ctx, x, rep, ans, body, received)
		return
	}
}

// holdStream reads a stream to its end through x, whose turn holds all of
// it (Turn.Feed, for a call that offers the read tool), and returns the
// upstream's error, if any but its end.
func holdStream(r io.Reader, x *pipeline.Exchange) error {
	buf := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(buf)
	for {
		n, err := r.Read(*buf)
		if n > 0 {
			x.Feed((*buf)[:n])
		}
		if err != nil {
			x.End()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
