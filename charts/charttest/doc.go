// Package charttest tests the Helm chart in charts/haltline: helm lint,
// golden manifests for the standalone and sidecar values, the rendered
// objects' key fields, and values.schema.json rejecting wrong values. Helm
// comes from the Go module proxy, pinned in tools/go.mod, and runs through
// go run (the first run builds it, which takes a few minutes).
//
// It owns: tests of the chart. It must not import gateway packages other
// than config (whose parser checks the rendered gateway.yaml).
package charttest
