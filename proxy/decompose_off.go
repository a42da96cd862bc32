//go:build !haltline_decompose

package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/config"
)

// decomposeRelay is false in release builds: the relay-alone switch of
// decompose.go exists only in builds with the haltline_decompose tag, and
// the compiler drops the branch that tests it.
const decomposeRelay = false

func (s *Server) relayAlone(*fasthttp.RequestCtx, time.Time, []byte, *config.Provider, func(), *bool) bool {
	return false
}
