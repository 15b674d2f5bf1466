// Package e2e holds Ichor's full-stack scenarios, run through the CLI and the UI
// API against the emulated world (tools/talosemu). The short set runs in
// `go tool task test`; the full set in `go tool task e2e:full`.
package e2e
