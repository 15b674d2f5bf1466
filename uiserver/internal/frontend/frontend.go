// Package frontend embeds the web console (webapp/, built by `go tool task
// generate` into dist/). A placeholder dist/index.html is committed so that the
// Go build never needs Node.
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
