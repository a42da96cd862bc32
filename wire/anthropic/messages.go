package anthropic

import (
	"github.com/haltline/haltline/wire"
)

// Messages is the codec of Anthropic's Messages API. It is stateless; the
// zero value is ready and safe for concurrent use.
type Messages struct{}

// Compile-time guard: Messages is a wire.Codec.
var _ wire.Codec = Messages{}

// API reports wire.APIMessages.
func (Messages) API() wire.API { return wire.APIMessages }

// finishReason normalises an Anthropic stop_reason to the gateway's
// vocabulary. pause_turn (a server tool's long turn, to be continued by the
// client) is neither an answer nor a tool call, so it stays unknown ("").
func finishReason(stop string) string {
	switch stop {
	case "end_turn", "stop_sequence":
		return "stop"
	case "tool_use":
		return "tool_calls"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "refusal":
		return "content_filter"
	}
	return ""
}
