package envoy

import (
	"os"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/goccy/go-yaml"
	"google.golang.org/protobuf/encoding/protojson"

	// Registered so that the config's typed_config Any types resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// load reads envoy.yaml as Envoy does: YAML → JSON → Bootstrap (proto3
// JSON, unknown fields rejected), then the API's validation rules.
func load(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	y, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(j, &b); err != nil {
		t.Fatalf("envoy.yaml is not a valid Bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml breaks the API's rules: %v", err)
	}
	return &b
}

func TestSampleConfigIsValidBootstrap(t *testing.T) {
	t.Parallel()
	load(t)
}

// The processing mode the ext_proc server relies on (extproc/doc.go).
func TestSampleConfigProcessingMode(t *testing.T) {
	t.Parallel()
	b := load(t)
	var hcm hcmv3.HttpConnectionManager
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 || filters[1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("filters %v: ext_proc must come before the router", filters)
	}
	var ep extprocv3.ExternalProcessor
	if err := filters[0].GetTypedConfig().UnmarshalTo(&ep); err != nil {
		t.Fatal(err)
	}
	m := ep.GetProcessingMode()
	for _, c := range []struct {
		desc string
		ok   bool
	}{
		{"request headers sent", m.GetRequestHeaderMode() == extprocv3.ProcessingMode_SEND},
		{"request body buffered", m.GetRequestBodyMode() == extprocv3.ProcessingMode_BUFFERED},
		{"response headers sent", m.GetResponseHeaderMode() == extprocv3.ProcessingMode_SEND},
		{"response body streamed", m.GetResponseBodyMode() == extprocv3.ProcessingMode_STREAMED},
		{"mode override allowed", ep.GetAllowModeOverride()},
		{"fails closed", !ep.GetFailureModeAllow()},
		{"response.code_details requested", slices.Contains(ep.GetResponseAttributes(), "response.code_details")},
		{"grpc cluster is haltline", ep.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "haltline"},
	} {
		if !c.ok {
			t.Errorf("%s: not so in envoy.yaml", c.desc)
		}
	}
}
