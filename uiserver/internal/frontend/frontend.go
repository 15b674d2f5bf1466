// Package frontend embeds the web console: webapp/, built by `go tool task
// generate` (generate:webapp) into dist/. The build is committed, and
// reproducible byte for byte, so that the Go build never needs Node and
// `go tool task verify` sees any drift.
package frontend

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// FS returns the built single-page application, rooted at its index.html.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// dist is embedded at compile time; fs.Sub fails only on an invalid name.
		panic(err)
	}
	return sub
}
