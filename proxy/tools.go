package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/haltline/haltline/pipeline"
	"github.com/haltline/haltline/wire/mcp"
)

// The tool routes (docs/design.md §2): /mcp/{server} speaks MCP over streamable
// HTTP, where tools/call is governed and every other method passes
// unchanged; /tools/{name}/… forwards each request to a plain HTTP tool as
// one governed call. Both drive the pipeline's ToolExchange (OpenTool,
// Finish) and render its answers in their own format.

// toolTarget is an upstream tool endpoint with its credential headers,
// resolved once at start: the agent and the model only see the route.
type toolTarget struct {
	url     string
	headers map[string]string
}

// toolRoutes is the tool front end's state, built from Options on first use.
type toolRoutes struct {
	s     *Server
	mcp   map[string]toolTarget
	http  map[string]toolTarget
	learn sync.Map // server → *sync.Mutex: one tools/list fetch at a time
}

var toolRouteStates sync.Map // *Server → *toolRoutes

// tools returns the server's tool routes. A side table keeps the tool front
// end in its own file.
func (s *Server) tools() *toolRoutes {
	if v, ok := toolRouteStates.Load(s); ok {
		return v.(*toolRoutes)
	}
	tr := newToolRoutes(s, os.Getenv)
	v, _ := toolRouteStates.LoadOrStore(s, tr)
	return v.(*toolRoutes)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// resolveHeaders expands ${ENV} references in configured header values.
func resolveHeaders(h map[string]string, getenv func(string) string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[http.CanonicalHeaderKey(k)] = envRef.ReplaceAllStringFunc(v, func(m string) string {
			return getenv(m[2 : len(m)-1])
		})
	}
	return out
}

func newToolRoutes(s *Server, getenv func(string) string) *toolRoutes {
	tr := &toolRoutes{s: s, mcp: map[string]toolTarget{}, http: map[string]toolTarget{}}
	reg := s.p.ToolRegistry()
	for name, srv := range s.o.MCPServers {
		tr.mcp[name] = toolTarget{url: srv.URL, headers: resolveHeaders(srv.Headers, getenv)}
		for tool, spec := range srv.Tools {
			reg.Declare(name, tool, spec.Level, spec.CostUSD)
		}
	}
	for name, t := range s.o.Tools {
		tr.http[name] = toolTarget{url: strings.TrimRight(t.URL, "/"), headers: resolveHeaders(t.Headers, getenv)}
		reg.Declare("", name, t.Level, t.CostUSD)
	}
	return tr
}

// DeclareTools loads the configured tools into the pipeline's registry
// now rather than at the first tool request, so that the tool step of a
// model response already sees their levels and costs.
func (s *Server) DeclareTools() { s.tools() }

// toolCall builds the pipeline's call from the request's run headers.
func (s *Server) toolCall(ctx *fasthttp.RequestCtx, principal pipeline.Principal, server, name string, args []byte) *pipeline.ToolCall {
	c := &pipeline.ToolCall{Server: server, Name: name, Arguments: args,
		Principal: principal, Timeout: s.o.Limits.UpstreamTimeout}
	c.ReadHeaders(func(name string) string { return string(ctx.Request.Header.Peek(name)) })
	return c
}

// toolRequest builds the upstream request: the agent's headers less its
// credential, the run headers and hop-by-hop ones, then the configured
// credential headers and the run's deadline.
func (tr *toolRoutes) toolRequest(ctx context.Context, in *fasthttp.RequestCtx, method, target string, body []byte, t toolTarget, deadlineMs int64) (*http.Request, error) {
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	in.Request.Header.VisitAll(func(k, v []byte) {
		name := http.CanonicalHeaderKey(string(k))
		switch {
		case hopHeaders[name], name == "Host", name == "Accept-Encoding", name == "Authorization",
			name == "X-Api-Key", name == "Cookie", pipeline.IsRunHeader(name):
			return
		}
		req.Header.Add(name, string(v))
	})
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	if deadlineMs > 0 {
		req.Header.Set(pipeline.HeaderRunDeadline, strconv.FormatInt(deadlineMs, 10))
	}
	return req, nil
}

// --- MCP ---------------------------------------------------------------

// mcpRoute serves /mcp/{server}.
func (s *Server) mcpRoute(ctx *fasthttp.RequestCtx) {
	tr := s.tools()
	name := strings.Trim(strings.TrimPrefix(string(ctx.Path()), "/mcp/"), "/")
	target, ok := tr.mcp[name]
	if !ok {
		writeRPC(ctx, 404, mcp.ErrorMessage(nil, mcp.CodeInvalidRequest, "unknown MCP server "+strconv.Quote(sanitize(name)), nil))
		return
	}
	principal, ok := s.credential(ctx)
	if !ok {
		writeRPC(ctx, 401, mcp.ErrorMessage(nil, mcp.CodeInvalidRequest, "unknown API key", nil))
		return
	}
	if !ctx.IsPost() {
		// GET (the server's SSE stream), DELETE (end of session): unchanged.
		tr.passMCP(ctx, target, nil, false)
		return
	}
	body, err := readBody(ctx, tr.s.o.Limits.MaxBodyBytes)
	if err != nil {
		status, _, msg := bodyRefusal(err)
		writeRPC(ctx, status, mcp.ErrorMessage(nil, mcp.CodeInvalidRequest, msg, nil))
		return
	}
	ctx.SetUserValue(bodyKey{}, body)
	msg, err := mcp.ParseRequest(body)
	if err != nil {
		var pe *mcp.ParseError
		code := mcp.CodeParseError
		if errors.As(err, &pe) {
			code = pe.Code
		}
		writeRPC(ctx, 400, mcp.ErrorMessage(nil, code, err.Error(), nil))
		return
	}
	switch {
	case msg.IsRequest() && msg.Method == mcp.MethodToolsCall:
		tr.toolsCall(ctx, name, target, principal, &msg)
	case msg.IsRequest() && msg.Method == mcp.MethodToolsList:
		tr.toolsList(ctx, name, target, &msg)
	default:
		tr.passMCP(ctx, target, body, true)
	}
}

// passMCP relays a request and streams its answer back unchanged.
func (tr *toolRoutes) passMCP(ctx *fasthttp.RequestCtx, t toolTarget, body []byte, bounded bool) {
	cctx, cancel := context.WithCancel(context.Background())
	if bounded {
		cctx, cancel = context.WithTimeout(context.Background(), tr.s.o.Limits.UpstreamTimeout)
	}
	req, err := tr.toolRequest(cctx, ctx, string(ctx.Method()), t.url, body, t, 0)
	if err != nil {
		cancel()
		writeRPC(ctx, 502, mcp.ErrorMessage(nil, mcp.CodeBadGateway, "cannot build the upstream request", nil))
		return
	}
	watch := watchHangupAfter(ctx.Conn(), hangupWatchDelay, cancel)
	resp, err := tr.s.client.Do(req)
	if err != nil {
		watch.Stop()
		cancel()
		writeRPC(ctx, 502, mcp.ErrorMessage(nil, mcp.CodeBadGateway, "MCP server unreachable", nil))
		return
	}
	copyHeaders(&ctx.Response.Header, resp.Header)
	ctx.SetStatusCode(resp.StatusCode)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer cancel()
		defer resp.Body.Close()
		defer watch.Stop()
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				if w.Flush() != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// mcpExchange posts one message to the server and reads the whole answer.
func (tr *toolRoutes) mcpExchange(cctx context.Context, ctx *fasthttp.RequestCtx, t toolTarget, body []byte, deadlineMs int64) (*http.Response, []byte, error) {
	req, err := tr.toolRequest(cctx, ctx, http.MethodPost, t.url, body, t, deadlineMs)
	if err != nil {
		return nil, nil, err
	}
	resp, err := tr.s.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := readBounded(resp.Body, tr.s.o.Limits.MaxResponseBytes)
	return resp, b, err
}

// toolsList relays tools/list, learns the schemas and annotations it
// lists, and adds the gateway's read tool.
func (tr *toolRoutes) toolsList(ctx *fasthttp.RequestCtx, server string, t toolTarget, msg *mcp.Message) {
	cctx, cancel := context.WithTimeout(context.Background(), tr.s.o.Limits.UpstreamTimeout)
	defer cancel()
	resp, body, err := tr.mcpExchange(cctx, ctx, t, requestBody(ctx), 0)
	if err != nil {
		writeRPC(ctx, 200, mcp.ErrorMessage(msg.ID, mcp.CodeBadGateway, "MCP server failed: "+upstreamErr(err), nil))
		return
	}
	copyHeaders(&ctx.Response.Header, resp.Header)
	ctx.SetStatusCode(resp.StatusCode)
	if resp.StatusCode == 200 {
		rb, err := mcp.ParseResponse(body, isEventStream(resp.Header), msg.ID)
		if err == nil && rb.Messages[rb.Index].Result != nil {
			res := rb.Messages[rb.Index].Result
			if tools, err := mcp.ParseToolsList(res); err == nil {
				reg := tr.s.p.ToolRegistry()
				for i := range tools {
					reg.Learn(server, tools[i].Name, tools[i].InputSchema, tools[i].Hints())
				}
				if withRead, err := mcp.AppendTool(res, readBlobToolDef); err == nil {
					body = rb.Encode(mcp.ResultMessage(msg.ID, withRead))
				}
			}
		}
	}
	ctx.SetBody(body)
}

// readBlobToolDef is the read tool the gateway adds to every server.
var readBlobToolDef = []byte(`{"name":"` + pipeline.ReadBlobTool + `","title":"Read a cut tool result",` +
	`"description":"Returns the full text of a tool result that the gateway cut because it was long. ` +
	`Pass the handle named in the cut result; offset and length (in characters) choose a slice of it.",` +
	`"inputSchema":` + pipeline.ReadBlobSchema + `,` +
	`"annotations":{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}}`)

// learnTools fetches tools/list once for a server whose schemas are not
// known yet, in the agent's session, so that the schema gate works even
// when the agent listed tools elsewhere. Failures leave the gate open.
func (tr *toolRoutes) learnTools(ctx *fasthttp.RequestCtx, server string, t toolTarget) {
	mu, _ := tr.learn.LoadOrStore(server, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const list = `{"jsonrpc":"2.0","id":"haltline-tools-list","method":"tools/list"}`
	resp, body, err := tr.mcpExchange(cctx, ctx, t, []byte(list), 0)
	if err != nil || resp.StatusCode != 200 {
		return
	}
	rb, err := mcp.ParseResponse(body, isEventStream(resp.Header), json.RawMessage(`"haltline-tools-list"`))
	if err != nil || rb.Messages[rb.Index].Result == nil {
		return
	}
	tools, err := mcp.ParseToolsList(rb.Messages[rb.Index].Result)
	if err != nil {
		return
	}
	reg := tr.s.p.ToolRegistry()
	for i := range tools {
		reg.Learn(server, tools[i].Name, tools[i].InputSchema, tools[i].Hints())
	}
}

// toolsCall governs one tools/call.
func (tr *toolRoutes) toolsCall(ctx *fasthttp.RequestCtx, server string, t toolTarget, principal pipeline.Principal, msg *mcp.Message) {
	s := tr.s
	params, err := mcp.ParseCall(msg.Params)
	if err != nil {
		writeRPC(ctx, 200, mcp.ErrorMessage(msg.ID, mcp.CodeInvalidParams, err.Error(), nil))
		return
	}
	if params.Name == pipeline.ReadBlobTool {
		tr.readBlob(ctx, principal.Tenant, msg, params.Arguments)
		return
	}
	reg := s.p.ToolRegistry()
	if !reg.Known(server, params.Name) {
		tr.learnTools(ctx, server, t)
	}
	tx := s.p.OpenTool(context.Background(), s.toolCall(ctx, principal, server, params.Name, params.Arguments), ctx.Response.Header.Set)
	tt := tx.Turn()
	if tt.Answer != nil {
		writeRPC(ctx, 200, mcpAnswer(msg.ID, tt))
		return
	}
	cctx, cancel := context.WithTimeout(tt.Ctx, tt.Timeout)
	defer cancel()
	resp, body, err := tr.mcpExchange(cctx, ctx, t, requestBody(ctx), tt.DeadlineMs)
	if err != nil {
		tx.Finish(pipeline.ToolOutcome{Err: err})
		code, text := mcp.CodeBadGateway, "MCP server failed: "+upstreamErr(err)
		if errors.Is(err, context.DeadlineExceeded) {
			code, text = mcp.CodeToolTimeout, fmt.Sprintf("tool %s timed out after %d ms", params.Name, tt.Timeout.Milliseconds())
		}
		writeRPC(ctx, 200, mcp.ErrorMessage(msg.ID, code, text, nil))
		return
	}
	if resp.StatusCode != 200 {
		// Session trouble and the like: the agent must see the server's own
		// answer to recover (re-initialize); the attempt is metered.
		copyHeaders(&ctx.Response.Header, resp.Header)
		tx.Finish(pipeline.ToolOutcome{Err: fmt.Errorf("MCP server answered HTTP %d", resp.StatusCode)})
		ctx.SetStatusCode(resp.StatusCode)
		ctx.SetBody(body)
		return
	}
	rb, err := mcp.ParseResponse(body, isEventStream(resp.Header), msg.ID)
	var result mcp.ToolResult
	if err == nil && rb.Messages[rb.Index].Result != nil {
		result, err = mcp.ParseToolResult(rb.Messages[rb.Index].Result)
	}
	if err != nil {
		tx.Finish(pipeline.ToolOutcome{Err: err})
		writeRPC(ctx, 200, mcp.ErrorMessage(msg.ID, mcp.CodeBadGateway,
			"MCP server answered something that is not a JSON-RPC response to this call", nil))
		return
	}
	m := rb.Messages[rb.Index]
	copyHeaders(&ctx.Response.Header, resp.Header)
	if m.Error != nil {
		// A protocol error of the server (unknown tool, bad params): relayed
		// as it came, metered as an attempt that failed.
		tx.Finish(pipeline.ToolOutcome{IsError: true, Text: m.Error.Message})
		ctx.SetStatusCode(200)
		ctx.SetBody(body)
		return
	}
	text := result.Text()
	res := tx.Finish(pipeline.ToolOutcome{IsError: result.IsError, Text: text,
		Render: func(cut string) pipeline.StoredResult {
			out := []byte(m.Result)
			if cut != text {
				out = result.ReplaceText(cut)
			}
			return pipeline.StoredResult{Status: 200, ContentType: "application/json", Body: out}
		}})
	ctx.SetStatusCode(200)
	ctx.SetBody(rb.Encode(mcp.ResultMessage(msg.ID, res.Body)))
}

// readBlob answers the gateway's read tool itself, from the blobs of the
// caller's tenant only: the whole text, or the slice offset and length
// ask for.
func (tr *toolRoutes) readBlob(ctx *fasthttp.RequestCtx, tenant string, msg *mcp.Message, args json.RawMessage) {
	text, bad := tr.s.p.ReadBlobSlice(pipeline.BlobOfTenant(tenant), args, 0)
	writeRPC(ctx, 200, mcp.ResultMessage(msg.ID, mcp.TextResult(text, bad, nil)))
}

// mcpAnswer renders the gateway's own answer to tools/call: a stored result
// again for a repeat, a JSON-RPC error when the gateway cannot decide, and
// otherwise an isError result whose text names the reason (the model reads
// it) with the details in _meta.haltline.
func mcpAnswer(id json.RawMessage, tt *pipeline.ToolTurn) []byte {
	a := tt.Answer
	switch a.Kind {
	case pipeline.ToolReplayed:
		return mcp.ResultMessage(id, a.Stored.Body)
	case pipeline.ToolUnavailable:
		return mcp.ErrorMessage(id, mcp.CodeInternalError, a.Message, nil)
	case pipeline.ToolBadRequest:
		return mcp.ErrorMessage(id, mcp.CodeInvalidParams, a.Message, nil)
	}
	meta := answerDetails(tt)
	var r struct {
		Content []mcp.Content  `json:"content"`
		IsError bool           `json:"isError"`
		Meta    map[string]any `json:"_meta"`
	}
	r.Content = []mcp.Content{{Type: "text", Text: a.Message}}
	r.IsError = true
	r.Meta = map[string]any{"haltline": meta}
	b, _ := json.Marshal(r)
	return mcp.ResultMessage(id, b)
}

// answerDetails is the machine-readable part of a gateway answer.
func answerDetails(tt *pipeline.ToolTurn) map[string]any {
	a := tt.Answer
	d := map[string]any{"type": answerType(a.Kind), "reason": a.Reason, "message": a.Message, "run_id": tt.RunID()}
	if a.Approval != nil {
		d["ticket"] = a.Approval.Ticket
		d["status"] = a.Approval.Status
		d["expires"] = a.Approval.Expires
	}
	if len(a.Schema) > 0 {
		d["schema"] = a.Schema
	}
	if a.Termination != "" {
		d["termination"] = a.Termination
	}
	return d
}

func answerType(k pipeline.ToolAnswerKind) string {
	switch k {
	case pipeline.ToolDenied:
		return "tool_denied"
	case pipeline.ToolSchemaError:
		return "schema_error"
	case pipeline.ToolPending:
		return "approval_pending"
	case pipeline.ToolApprovalDenied:
		return "approval_denied"
	case pipeline.ToolRunEnded:
		return "run_ended"
	case pipeline.ToolBusy:
		return "in_progress"
	case pipeline.ToolBadRequest:
		return "invalid_request"
	}
	return "unavailable"
}

func writeRPC(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// upstreamErr names a transport failure without echoing URLs or secrets.
func upstreamErr(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, errResponseTooLarge):
		return err.Error()
	}
	return "unreachable"
}

// --- plain HTTP tools ---------------------------------------------------

// httpToolRoute serves /tools/{name}/…: each request is one call of tool
// name, forwarded to <url>/….
func (s *Server) httpToolRoute(ctx *fasthttp.RequestCtx) {
	tr := s.tools()
	rest := strings.TrimPrefix(string(ctx.Path()), "/tools/")
	name, sub, _ := strings.Cut(rest, "/")
	target, ok := tr.http[name]
	if !ok {
		writeToolError(ctx, 404, map[string]any{"type": "not_found", "message": "unknown tool " + strconv.Quote(sanitize(name))})
		return
	}
	principal, ok := s.credential(ctx)
	if !ok {
		writeToolError(ctx, 401, map[string]any{"type": "authentication_error", "message": "unknown API key"})
		return
	}
	body, err := readBody(ctx, s.o.Limits.MaxBodyBytes)
	if err != nil {
		status, _, msg := bodyRefusal(err)
		kind := "invalid_request"
		if status == 413 {
			kind = "request_too_large"
		}
		writeToolError(ctx, status, map[string]any{"type": kind, "message": msg})
		return
	}
	args := httpArguments(body, ctx.QueryArgs(), sub)
	tx := s.p.OpenTool(context.Background(), s.toolCall(ctx, principal, "", name, args), ctx.Response.Header.Set)
	tt := tx.Turn()
	if tt.Answer != nil {
		if a := tt.Answer; a.Kind == pipeline.ToolReplayed {
			ctx.SetStatusCode(a.Stored.Status)
			if a.Stored.ContentType != "" {
				ctx.SetContentType(a.Stored.ContentType)
			}
			if a.Stored.Handle != "" {
				ctx.Response.Header.Set("X-Haltline-Blob", a.Stored.Handle)
			}
			ctx.SetBody(a.Stored.Body)
			return
		}
		writeToolError(ctx, tt.Answer.Status, answerDetails(tt))
		return
	}
	u := target.url + "/" + sub
	if q := ctx.URI().QueryString(); len(q) > 0 {
		u += "?" + string(q)
	}
	cctx, cancel := context.WithTimeout(tt.Ctx, tt.Timeout)
	defer cancel()
	req, err := tr.toolRequest(cctx, ctx, string(ctx.Method()), u, body, target, tt.DeadlineMs)
	var resp *http.Response
	var rbody []byte
	if err == nil {
		if resp, err = s.client.Do(req); err == nil {
			rbody, err = readBounded(resp.Body, s.o.Limits.MaxResponseBytes)
			resp.Body.Close()
		}
	}
	if err != nil {
		tx.Finish(pipeline.ToolOutcome{Err: err})
		status, typ := 502, "bad_gateway"
		if errors.Is(err, context.DeadlineExceeded) {
			status, typ = 504, "timeout"
		}
		writeToolError(ctx, status, map[string]any{"type": typ, "message": fmt.Sprintf("tool %s failed: %s", name, upstreamErr(err)), "run_id": tt.RunID()})
		return
	}
	text, textual := string(rbody), utf8.Valid(rbody)
	if !textual {
		text = "" // binary output is neither cut nor hashed as text
	}
	ct := resp.Header.Get("Content-Type")
	copyHeaders(&ctx.Response.Header, resp.Header)
	res := tx.Finish(pipeline.ToolOutcome{IsError: resp.StatusCode >= 400, Text: text,
		Render: func(cut string) pipeline.StoredResult {
			if textual && cut != text {
				return pipeline.StoredResult{Status: resp.StatusCode, ContentType: "text/plain; charset=utf-8", Body: jsonString(cut)}
			}
			return pipeline.StoredResult{Status: resp.StatusCode, ContentType: ct, Body: rawBody(rbody)}
		}})
	ctx.SetStatusCode(res.Status)
	if res.ContentType != "" {
		ctx.SetContentType(res.ContentType)
	}
	if res.Handle != "" {
		ctx.Response.Header.Set("X-Haltline-Blob", res.Handle)
	}
	ctx.SetBody(plainBody(res))
}

// StoredResult.Body is JSON: an HTTP tool's body is kept as a JSON string
// unless it already is JSON, so any body survives the store.
func rawBody(b []byte) json.RawMessage {
	if json.Valid(b) && len(bytes.TrimSpace(b)) > 0 {
		return b
	}
	return jsonString(string(b))
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// plainBody turns a stored HTTP body back into the bytes to send.
func plainBody(res pipeline.StoredResult) []byte {
	var s string
	if len(res.Body) > 0 && res.Body[0] == '"' && json.Unmarshal(res.Body, &s) == nil {
		return []byte(s)
	}
	return res.Body
}

// httpArguments are the call's arguments for policy and fingerprints: a
// JSON object body as it is (the model's arguments, as the framework sends
// them), else the query as an object; a sub-path other than "/" is added
// as "_path".
func httpArguments(body []byte, q *fasthttp.Args, sub string) []byte {
	var obj map[string]any
	if b := bytes.TrimSpace(body); len(b) > 0 {
		if json.Unmarshal(b, &obj) != nil {
			obj = map[string]any{"_body": string(body)}
		}
	} else {
		obj = map[string]any{}
		q.VisitAll(func(k, v []byte) { obj[string(k)] = string(v) })
	}
	if sub != "" {
		if p, err := url.PathUnescape(sub); err == nil {
			obj["_path"] = p
		}
	}
	if len(obj) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(obj)
	return b
}

func writeToolError(ctx *fasthttp.RequestCtx, status int, details map[string]any) {
	b, _ := json.Marshal(map[string]any{"error": details})
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// bodyKey holds the request body read once by readBody (the body stream
// cannot be read twice).
type bodyKey struct{}

func requestBody(ctx *fasthttp.RequestCtx) []byte {
	b, _ := ctx.UserValue(bodyKey{}).([]byte)
	return b
}
