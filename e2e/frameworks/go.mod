module github.com/haltline/haltline/e2e/frameworks

// This module holds no Go package: it keeps the Node project's
// node_modules out of the gateway's module (go vet ./..., go test ./...).

go 1.26.8
