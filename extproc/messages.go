package extproc

import (
	"context"
	"errors"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/haltline/haltline/pipeline"
)

// headerUpstreamTimeout is the request header through which Envoy's router
// takes a per-request upstream timeout (it strips it before forwarding).
const headerUpstreamTimeout = "x-envoy-upstream-rq-timeout-ms"

// headers are the first value of each header, by lower-case name (Envoy
// sends names lower-cased already).
type headers map[string]string

func readHeaders(m *corev3.HeaderMap) headers {
	h := make(headers, len(m.GetHeaders()))
	for _, hv := range m.GetHeaders() {
		k := strings.ToLower(hv.GetKey())
		if _, dup := h[k]; dup {
			continue
		}
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		h[k] = v
	}
	return h
}

func (h headers) get(name string) string { return h[name] }

// path is :path without its query string.
func (h headers) path() string {
	p := h[":path"]
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return p
}

// mutation accumulates header changes.
type mutation struct {
	sets    []*corev3.HeaderValueOption
	removes []string
}

func (m *mutation) set(name, value string) {
	m.sets = append(m.sets, &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: strings.ToLower(name), RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	})
}

func (m *mutation) remove(name string) { m.removes = append(m.removes, name) }

func (m *mutation) build() *extprocv3.HeaderMutation {
	if m == nil || (len(m.sets) == 0 && len(m.removes) == 0) {
		return nil
	}
	return &extprocv3.HeaderMutation{SetHeaders: m.sets, RemoveHeaders: m.removes}
}

func headersResponse(response bool, hm *extprocv3.HeaderMutation, mode *filterv3.ProcessingMode) *extprocv3.ProcessingResponse {
	hr := &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: hm}}
	r := &extprocv3.ProcessingResponse{ModeOverride: mode}
	if response {
		r.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}
	} else {
		r.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: hr}
	}
	return r
}

func bodyResponse(response bool, hm *extprocv3.HeaderMutation, bm *extprocv3.BodyMutation) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{HeaderMutation: hm, BodyMutation: bm}}
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
}

func replaceBody(b []byte) *extprocv3.BodyMutation {
	if len(b) == 0 {
		return clearBody()
	}
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: b}}
}

func clearBody() *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
}

func immediateResponse(a *pipeline.Answer, hm *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(a.Status)},
			Headers: hm,
			Body:    a.Body,
			Details: "haltline",
		}}}
}

// Processing modes the server asks for. They take effect only with
// allow_mode_override: true in the filter config.
func modelMode() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestHeaderMode:  filterv3.ProcessingMode_SEND,
		RequestBodyMode:    filterv3.ProcessingMode_BUFFERED,
		ResponseHeaderMode: filterv3.ProcessingMode_SEND,
		ResponseBodyMode:   filterv3.ProcessingMode_STREAMED,
	}
}

func streamedResponse() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SEND,
		ResponseBodyMode: filterv3.ProcessingMode_STREAMED}
}

func bufferedResponse() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{ResponseHeaderMode: filterv3.ProcessingMode_SEND,
		ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}
}

// skipRest lets the rest of an exchange the gateway does not govern pass
// without further messages.
func skipRest() *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestBodyMode:     filterv3.ProcessingMode_NONE,
		ResponseHeaderMode:  filterv3.ProcessingMode_SKIP,
		ResponseBodyMode:    filterv3.ProcessingMode_NONE,
		RequestTrailerMode:  filterv3.ProcessingMode_SKIP,
		ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
	}
}

// attributes are the ProcessingRequest's attributes, by filter name.
type attributes = map[string]*structpb.Struct

// attributeNamespace is where Envoy puts the attributes the filter config
// asks for (response_attributes).
const attributeNamespace = "envoy.filters.http.ext_proc"

// localFailure reports Envoy's own reply for an upstream it could not
// reach, from response.code_details (requested in the filter config); nil
// for a response that came from the upstream, or when the attribute is not
// configured (then the reply passes through like an upstream error).
func localFailure(attrs attributes) error {
	v := attrs[attributeNamespace].GetFields()["response.code_details"]
	d := v.GetStringValue()
	switch {
	case d == "", d == "via_upstream":
		return nil
	case strings.Contains(d, "timeout"):
		return context.DeadlineExceeded
	case strings.HasPrefix(d, "upstream_"), d == "no_healthy_upstream", d == "cluster_not_found":
		return errors.New("envoy: " + d)
	}
	return nil
}
