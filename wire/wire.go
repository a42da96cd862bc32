package wire

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// API names a provider API that the gateway governs as model calls.
type API uint8

const (
	APIUnknown   API = iota
	APIChat          // OpenAI POST /v1/chat/completions
	APIResponses     // OpenAI POST /v1/responses
	APIMessages      // Anthropic POST /v1/messages
)

func (a API) String() string {
	switch a {
	case APIChat:
		return "openai.chat"
	case APIResponses:
		return "openai.responses"
	case APIMessages:
		return "anthropic.messages"
	}
	return "unknown"
}

// Provider returns the provider family, used for pricing and error formats.
func (a API) Provider() string {
	if a == APIMessages {
		return "anthropic"
	}
	return "openai"
}

// Usage is a call's token usage normalised to docs/design.md §12: InputTokens is the
// whole prompt (OpenAI prompt_tokens with cached included; Anthropic
// input_tokens + cache reads + cache writes); CachedTokens (cache reads),
// CacheWriteTokens and ReasoningTokens are detail counts inside input and
// output. Nothing is counted twice.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// Total is input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + o.InputTokens,
		OutputTokens:     u.OutputTokens + o.OutputTokens,
		ReasoningTokens:  u.ReasoningTokens + o.ReasoningTokens,
		CachedTokens:     u.CachedTokens + o.CachedTokens,
		CacheWriteTokens: u.CacheWriteTokens + o.CacheWriteTokens,
	}
}

// ToolCall is one tool action a model asked for.
type ToolCall struct {
	ID        string // provider's call id (tool_calls[].id, call_id, tool_use.id)
	Name      string
	Arguments []byte // the arguments as JSON text, exactly as the model produced them
}

// ToolResult is one tool result the agent sends back in its next request: the
// observation that the loop guard hashes.
type ToolResult struct {
	CallID  string
	Content []byte // result text (JSON string unescaped; block arrays as raw JSON)
	IsError bool
}

// Request is what the parse stage reads from a model request body. Slices
// may alias the body: they are valid while the body is.
type Request struct {
	API             API
	Model           string
	Stream          bool
	IncludeUsage    bool  // the client itself asked for stream_options.include_usage
	MaxOutputTokens int64 // the request's own output cap; 0 when it sets none
	HasTools        bool  // the request offers tools to the model
	// Tools is the raw JSON array of the tools offered (for chat, the
	// legacy functions array when there is no tools array); it aliases the
	// body. ToolNames reads it.
	Tools string
	// SerialTools is the pipeline's decision, set before PrepareUpstream:
	// the model must ask for one tool call at a time because a tool on
	// offer has a side effect (docs/design.md §6 levels L1, L2).
	SerialTools bool
	BodyBytes   int // size of the request body, the input estimate's basis

	// PreviousResponseID is the Responses API's continuation handle.
	PreviousResponseID string

	// Lineage: what the history says about the last assistant turn.
	// LastAssistantToolCallIDs are the tool-call ids of the last assistant
	// message (or Responses function_call items) in the history.
	LastAssistantToolCallIDs []string
	// LastAssistantTextHash is TextHash of the last assistant message's text,
	// 0 when the history holds no assistant message.
	LastAssistantTextHash uint64
	// LastAssistantPrefixHash folds (FoldConversation) the user messages
	// before the last assistant message; ConversationHash folds every user
	// message of the history. The response to this request is found again
	// by ConversationKey(ConversationHash, its TextHash), which the next
	// request computes as ConversationKey(LastAssistantPrefixHash,
	// LastAssistantTextHash).
	LastAssistantPrefixHash, ConversationHash uint64
	// NewUserTurn is true when a user message with text follows the last
	// assistant message (or there is no assistant message at all): a new task.
	NewUserTurn bool
	// ToolResults are the tool results after the last assistant message.
	ToolResults []ToolResult
	// Messages is the number of messages (input items) in the history.
	Messages int

	// Layout is the codec's note of where the large values of the body lie;
	// a Request built any other way leaves it zero.
	Layout Layout
}

// Response is what the gateway reads from a model response, streamed or not.
type Response struct {
	ID           string // response id (chatcmpl-…, resp_…, msg_…)
	Model        string
	Usage        Usage
	HasUsage     bool
	ToolCalls    []ToolCall
	FinishReason string // normalised: "stop", "tool_calls", "length", "content_filter", "error", ""
	// TextHash is TextHash of the assistant text, as a later request will
	// echo it back; 0 when the answer has no text.
	TextHash uint64
	// Text is the head of the assistant text (at most TextKeep bytes), kept as
	// the run's partial result.
	Text string
	// ErrorMessage is set when a stream carried an error event after a 200.
	ErrorMessage string
}

// TextKeep bounds Response.Text.
const TextKeep = 2048

// TextHash hashes assistant text the same way on the response side and on the
// request side, where the client echoes it back: surrounding white space is
// ignored. It never returns 0 for non-empty text.
func TextHash(s string) uint64 {
	s = trimSpace(s)
	if s == "" {
		return 0
	}
	h := xxh3.HashString(s)
	if h == 0 {
		h = 1
	}
	return h
}

// FoldConversation adds a user message, by the TextHash of its text, to
// the hash of the conversation before it (0 for none). Only user text is
// folded: it is what a client echoes back unchanged from call to call,
// where tool results may be rewritten and system prompts templated.
func FoldConversation(h, userText uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], h)
	binary.LittleEndian.PutUint64(b[8:], userText)
	return xxh3.Hash(b[:])
}

// ConversationKey is the lineage key of an assistant text (its TextHash)
// within its conversation (a FoldConversation hash): two conversations
// whose assistant said the same words do not share it. Never 0.
func ConversationKey(conversation, text uint64) uint64 {
	k := FoldConversation(conversation, text)
	if k == 0 {
		k = 1
	}
	return k
}

func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// ErrorKind classifies the gateway's own refusals and faults; each codec
// renders it in its provider's error format with the matching HTTP status.
type ErrorKind uint8

const (
	ErrInvalidRequest ErrorKind = iota // 400
	ErrAuthentication                  // 401
	ErrPolicyDenied                    // 403
	ErrNotFound                        // 404
	ErrTooLarge                        // 413
	ErrBudget                          // 429: budget or loop termination in reject mode
	ErrBadGateway                      // 502: upstream unreachable
	ErrUnavailable                     // 503: store or policy engine unavailable
	ErrTimeout                         // 504: upstream timeout or run deadline
)

// ErrorEvent renders an error as the SSE event of c's streams that the
// official SDKs raise as an error mid-stream: Anthropic's "event: error"
// with its error body; for OpenAI a data line whose object has an "error"
// member (openai-go and openai-node raise any such event), named "error"
// on Responses streams, where every event is named.
func ErrorEvent(c Codec, kind ErrorKind, message string) []byte {
	body := c.ErrorBody(kind, message, nil)
	out := make([]byte, 0, len(body)+24)
	if c.API() != APIChat {
		out = append(out, "event: error\n"...)
	}
	out = append(out, "data: "...)
	out = append(out, body...)
	return append(out, "\n\n"...)
}

// Status is the HTTP status of an error kind.
func (k ErrorKind) Status() int {
	switch k {
	case ErrInvalidRequest:
		return 400
	case ErrAuthentication:
		return 401
	case ErrPolicyDenied:
		return 403
	case ErrNotFound:
		return 404
	case ErrTooLarge:
		return 413
	case ErrBudget:
		return 429
	case ErrBadGateway:
		return 502
	case ErrUnavailable:
		return 503
	case ErrTimeout:
		return 504
	}
	return 500
}

// StreamTap reads a streamed (SSE) response on the side while it is relayed,
// and restores what the client would have received where the gateway changed
// the request (the injected include_usage chunk is removed again).
type StreamTap interface {
	// Feed consumes the next piece of the upstream body, cut anywhere, and
	// returns the bytes to send to the client now. The result may alias
	// chunk or an internal buffer and is valid until the next call. Events
	// the tap must inspect before passing (a possible usage-only chunk) are
	// held until complete.
	Feed(chunk []byte) []byte
	// End returns whatever is still held, at the end of the stream.
	End() []byte
	// Response is what the stream said so far: usage, tool calls (complete
	// once the stream ended), finish reason, text head.
	Response() *Response
	// Done reports that the stream's terminal event ([DONE],
	// response.completed, message_stop) was read in the last Feed. The
	// front end then settles the call before it relays those bytes, so an
	// agent's next request always finds the run up to date.
	Done() bool
	// Terminal reports whether event, one whole SSE event, is the stream's
	// terminal event, without reading it into the tap: the front end feeds
	// the bytes before it first, so that they reach the client without
	// waiting for the settlement.
	Terminal(event []byte) bool
	// ToolStarted reports that an event of a tool call has been read (an
	// OpenAI chat tool_calls delta, a Responses function_call item or its
	// argument delta, an Anthropic tool_use block): from there on the front
	// end holds the stream's bytes until the call is judged.
	ToolStarted() bool
	// Replace returns what the client receives instead of held, the bytes
	// the tap returned from the read in which the first tool call began to
	// the stream's end, when the run ends on this answer: held's events
	// that are no part of a tool call nor of the stream's end, then a
	// final answer of text ending the same stream (finish_reason stop,
	// stop_reason end_turn, a completed response) that carries the
	// stream's usage. Called once the stream ended.
	Replace(held []byte, text string) []byte
}

// Codec is one provider API's wire format. Implementations are stateless and
// safe for concurrent use.
type Codec interface {
	API() API
	// ParseRequest reads the fields of Request from a body; a body that is not
	// a JSON object of the API's shape is an error (rendered as 400).
	ParseRequest(body []byte) (Request, error)
	// PrepareUpstream returns the body to forward: for OpenAI chat streams it
	// injects stream_options.include_usage when the client did not ask for
	// it. maxOutput > 0 caps the request's output tokens (setting the field
	// when absent). It returns body itself when nothing changes.
	PrepareUpstream(body []byte, req *Request, maxOutput int64) ([]byte, error)
	// WrapUp returns the body rewritten as the run's wrap-up call: tools and
	// tool choice removed, instruction appended as the last user text,
	// output capped to maxOutput. The history stays valid for the provider.
	WrapUp(body []byte, req *Request, instruction string, maxOutput int64) ([]byte, error)
	// ParseResponse reads a non-streamed response body.
	ParseResponse(body []byte) (Response, error)
	// NewStreamTap starts reading a streamed response of req.
	NewStreamTap(req *Request) StreamTap
	// SyntheticFinal renders a complete, well-formed final assistant answer
	// with text, finish reason stop / end_turn and zero usage, as the
	// content type and body the client expects (SSE when req.Stream).
	SyntheticFinal(req *Request, text string) (contentType string, body []byte)
	// ErrorBody renders an error in the provider's error format; record, when
	// not nil, is a JSON object added under the key "haltline".
	ErrorBody(kind ErrorKind, message string, record []byte) []byte
}

// ToolRounds is implemented by codecs whose requests the gateway can
// extend with a tool of its own and a round of its calls (the read-back
// of cut tool output): the history stays valid for the provider.
type ToolRounds interface {
	// OfferTool returns body with a function tool (name, description, the
	// JSON schema of its arguments) added to its tools, or body itself
	// when it offers a tool of that name already.
	OfferTool(body []byte, name, description, schema string) ([]byte, error)
	// AppendToolRound returns body with an assistant turn (its text and
	// tool calls) and the results of those calls, in order, appended to
	// its history.
	AppendToolRound(body []byte, text string, calls []ToolCall, results []string) ([]byte, error)
}

// RequestBuilder is implemented by codecs that can write a request of the
// gateway's own in their API (the context manager's summary calls): one
// system instruction, one user message, no tools, not streamed.
type RequestBuilder interface {
	BuildRequest(model, system, user string, maxOutput int64) []byte
}
