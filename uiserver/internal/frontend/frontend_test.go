package frontend

import (
	"io/fs"
	"strings"
	"testing"
)

func TestIndexIsEmbedded(t *testing.T) {
	b, err := fs.ReadFile(FS(), "index.html")
	if err != nil {
		t.Fatalf("index.html is not embedded: %v", err)
	}
	if !strings.Contains(string(b), "<html") {
		t.Fatalf("index.html is not an HTML page: %q", b)
	}
}
