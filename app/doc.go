// Package app wires the gateway from its configuration (Start), and holds
// the command line (Main): serve, demo, runs, replay, policy test, store
// check|repair, version; every verb's -h, and exit status 2 for a command
// line it cannot read (cli.go). cmd/gateway only calls Main.
//
// It must not hold request logic: everything it builds is a package of its
// own.
package app
