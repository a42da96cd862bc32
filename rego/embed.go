package rego

import "embed"

// FS holds the default policies (*.rego, including their *_test.rego files)
// and data.json, whose top-level key is "haltline".
//
//go:embed *.rego data.json
var FS embed.FS
