package main

import (
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The gateway in parts (-decompose) is built from the gateway's own
// sources with `go build -overlay`: the harness's two files in
// testdata/decompose join packages proxy and app, and two of the
// gateway's files are read with a call of them added. The gateway itself
// has no switch that relays without the pipeline or drops store writes.
//
//go:embed testdata/decompose/*.go
var decomposeFiles embed.FS

// partsFiles are the harness's files added to the gateway's packages, by
// their path in the gateway's module.
var partsFiles = map[string]string{
	"proxy/decompose_relay.go": "testdata/decompose/relay.go",
	"app/decompose_nostore.go": "testdata/decompose/nostore.go",
}

// partsEdit is a change to one of the gateway's files: old, found there
// exactly once, becomes new.
type partsEdit struct {
	file, old, new string
}

// partsEdits call the added files: the model route relays a call alone
// before it builds the pipeline's call, and the embedded store is wrapped
// as it is opened. An edit whose old text is gone (the file changed) stops
// the build with its file and text named: update it here.
var partsEdits = []partsEdit{
	{
		file: "proxy/model.go",
		old:  "\th := &ctx.Request.Header\n\tcall := &pipeline.Call{\n",
		new: "\tif decomposeRelay && s.relayAlone(ctx, received, body, prov, release, &streaming) {\n\t\treturn\n\t}\n" +
			"\th := &ctx.Request.Header\n\tcall := &pipeline.Call{\n",
	},
	{
		file: "app/gateway.go",
		old:  "\treturn cached, accounting.NewMemBook(), nil, nil\n",
		new:  "\treturn decomposeStore(cached), accounting.NewMemBook(), nil, nil\n",
	},
}

// partsOverlay writes, under dir, the files of the gateway in parts and
// the overlay (go help build: -overlay) that puts them into the gateway's
// module at root; it returns the overlay's path.
func partsOverlay(root, dir string) (string, error) {
	dir = filepath.Join(dir, "parts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	replace := map[string]string{}
	write := func(modPath string, data []byte) error {
		out := filepath.Join(dir, strings.ReplaceAll(modPath, "/", "_"))
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return err
		}
		replace[filepath.Join(root, filepath.FromSlash(modPath))] = out
		return nil
	}
	for modPath, src := range partsFiles {
		data, err := decomposeFiles.ReadFile(src)
		if err != nil {
			return "", err
		}
		if err := write(modPath, data); err != nil {
			return "", err
		}
	}
	for _, e := range partsEdits {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(e.file)))
		if err != nil {
			return "", err
		}
		src := string(data)
		if n := strings.Count(src, e.old); n != 1 {
			return "", fmt.Errorf("the gateway in parts: %s holds %q %d times, not once (update partsEdits in bench/decompose.go)", e.file, e.old, n)
		}
		if err := write(e.file, []byte(strings.Replace(src, e.old, e.new, 1))); err != nil {
			return "", err
		}
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "overlay.json")
	return path, os.WriteFile(path, overlay, 0o644)
}
