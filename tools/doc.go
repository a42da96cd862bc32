// Package tools pins the tools the repository runs, in their own module so
// that their dependencies never reach the gateway's go.mod. Run Helm and
// golangci-lint (which checks the package layering against .golangci.yml) as
//
//	go tool -modfile=tools/go.mod helm lint charts/haltline
//	go run -modfile=tools/go.mod helm.sh/helm/v3/cmd/helm template charts/haltline
//	go tool -modfile=tools/go.mod golangci-lint run ./...
//
// from the repository root.
package tools
