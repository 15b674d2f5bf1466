package frontend

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// initialJSBudget is the most JavaScript, gzipped, that the console's first
// page may load (issue 11): the entry script and what it preloads.
const initialJSBudget = 150 * 1024

func TestIndexIsEmbedded(t *testing.T) {
	b, err := fs.ReadFile(FS(), "index.html")
	if err != nil {
		t.Fatalf("index.html is not embedded: %v", err)
	}
	if !strings.Contains(string(b), "<html") {
		t.Fatalf("index.html is not an HTML page: %q", b)
	}
}

var (
	scriptSrc  = regexp.MustCompile(`<script[^>]*type="module"[^>]*src="([^"]+)"`)
	preloadRef = regexp.MustCompile(`<link[^>]*rel="modulepreload"[^>]*href="([^"]+)"`)
	styleRef   = regexp.MustCompile(`<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"`)
)

// TestInitialJavaScriptBudget gzips the JavaScript index.html loads at start
// and fails over the budget; every asset index.html names must be embedded.
func TestInitialJavaScriptBudget(t *testing.T) {
	index, err := fs.ReadFile(FS(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	scripts := make([]string, 0, 4)
	for _, m := range scriptSrc.FindAllStringSubmatch(string(index), -1) {
		scripts = append(scripts, m[1])
	}
	for _, m := range preloadRef.FindAllStringSubmatch(string(index), -1) {
		scripts = append(scripts, m[1])
	}
	if len(scripts) == 0 {
		t.Fatalf("index.html loads no module script: the console is not built into dist (run `go tool task generate:webapp`):\n%s", index)
	}
	total := 0
	for _, src := range scripts {
		b, err := fs.ReadFile(FS(), strings.TrimPrefix(src, "/"))
		if err != nil {
			t.Fatalf("index.html loads %s, which is not embedded: %v", src, err)
		}
		n := gzipSize(t, b)
		t.Logf("%s: %d bytes, %d gzipped", src, len(b), n)
		total += n
	}
	for _, m := range styleRef.FindAllStringSubmatch(string(index), -1) {
		if _, err := fs.Stat(FS(), strings.TrimPrefix(m[1], "/")); err != nil {
			t.Errorf("index.html links %s, which is not embedded: %v", m[1], err)
		}
	}
	t.Logf("initial JavaScript: %d bytes gzipped (budget %d)", total, initialJSBudget)
	if total > initialJSBudget {
		t.Fatalf("the initial JavaScript is %.1f KiB gzipped, over the budget of %d KiB: split a screen into a lazy chunk or drop a dependency", float64(total)/1024, initialJSBudget/1024)
	}
}

func gzipSize(t *testing.T, b []byte) int {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Len()
}
