package wire_test

import (
	"testing"

	"github.com/haltline/haltline/wire"
	"github.com/haltline/haltline/wire/anthropic"
	"github.com/haltline/haltline/wire/openai"
)

// The requests the gateway writes itself parse back as requests of their
// API, with the model and the output cap it asked for.
func TestBuildRequestParsesBack(t *testing.T) {
	t.Parallel()
	for _, c := range []wire.Codec{openai.Chat{}, openai.Responses{}, anthropic.Messages{}} {
		t.Run(c.API().String(), func(t *testing.T) {
			t.Parallel()
			b, ok := c.(wire.RequestBuilder)
			if !ok {
				t.Fatal("no RequestBuilder")
			}
			req, err := c.ParseRequest(b.BuildRequest("m-1", "Summarise.", "turn text \"quoted\"", 300))
			if err != nil {
				t.Fatal(err)
			}
			if req.Model != "m-1" || req.MaxOutputTokens != 300 || req.Stream || req.HasTools {
				t.Fatalf("parsed %+v", req)
			}
		})
	}
}
