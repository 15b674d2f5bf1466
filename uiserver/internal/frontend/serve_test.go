package frontend

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

// answer is a recorded response, its body read whole.
type answer struct {
	StatusCode    int
	Header        http.Header
	ContentLength int64
	Body          io.Reader
}

func get(t *testing.T, h http.Handler, path, acceptEncoding string, hdr ...string) *answer {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	defer func() { _ = res.Body.Close() }()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &answer{StatusCode: res.StatusCode, Header: res.Header, ContentLength: res.ContentLength, Body: bytes.NewReader(raw)}
}

func body(t *testing.T, resp *answer) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("the body says gzip but is not: %v", err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// consoleAssets is the built console's files under assets/ (the JS and CSS bundles).
func consoleAssets(t *testing.T) []string {
	t.Helper()
	entries, err := fs.ReadDir(FS(), "assets")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no assets in dist (run `go tool task generate:webapp`): %v", err)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, "/assets/"+e.Name())
	}
	return out
}

// TestConsoleAssetsCompressed serves the embedded build: the hashed assets
// gzipped and cached for a year, index.html gzipped and revalidated, the
// console's routes answered with index.html, and plain bodies for a client
// that does not take gzip.
func TestConsoleAssetsCompressed(t *testing.T) {
	h, err := NewHandler(FS(), nil)
	if err != nil {
		t.Fatal(err)
	}
	index, _ := fs.ReadFile(FS(), "index.html")

	for _, p := range consoleAssets(t) {
		want, _ := fs.ReadFile(FS(), strings.TrimPrefix(p, "/"))
		resp := get(t, h, p, "gzip, deflate, br, zstd")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
		if got := resp.Header.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
			t.Errorf("%s: Cache-Control %q, want a year, immutable", p, got)
		}
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("%s: not gzipped for a browser that accepts gzip", p)
		}
		raw, _ := io.ReadAll(resp.Body)
		n := len(raw)
		resp.Body = bytes.NewReader(raw)
		if got := body(t, resp); !bytes.Equal(got, want) {
			t.Errorf("%s: the gzipped body is not the file", p)
		}
		t.Logf("%s: %d bytes, %d sent", p, len(want), n)
		if n <= 0 || n >= len(want)/2 {
			t.Errorf("%s: %d bytes sent for %d: not compressed", p, n, len(want))
		}
		if !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s: no Vary: Accept-Encoding, a shared cache could hand gzip to a client that cannot read it", p)
		}
		plain := get(t, h, p, "")
		if plain.Header.Get("Content-Encoding") != "" || !bytes.Equal(body(t, plain), want) {
			t.Errorf("%s: a client without Accept-Encoding gets the encoded body", p)
		}
		if refused := get(t, h, p, "gzip;q=0, identity"); refused.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s: gzipped although the client refused gzip (q=0)", p)
		}
	}

	for _, p := range []string{"/", "/index.html", "/nodes/cp-1/talos", "/add-node"} {
		resp := get(t, h, p, "gzip")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s, want the console's index.html", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("%s: Cache-Control %q, want no-cache (index.html names the current assets)", p, got)
		}
		if !bytes.Equal(body(t, resp), index) {
			t.Errorf("%s: not index.html", p)
		}
		etag := resp.Header.Get("ETag")
		if again := get(t, h, p, "gzip", "If-None-Match", etag); etag == "" || again.StatusCode != http.StatusNotModified {
			t.Errorf("%s: revalidating with ETag %q answered %d, want 304", p, etag, again.StatusCode)
		}
	}

	missing := get(t, h, "/assets/index-0ld.js", "gzip")
	if missing.StatusCode != http.StatusNotFound || missing.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("a missing asset answered %d (Cache-Control %q), want 404 and no-store, not index.html cached for a year",
			missing.StatusCode, missing.Header.Get("Cache-Control"))
	}
}

func TestHandlerRefusesWrites(t *testing.T) {
	h, err := NewHandler(fstest.MapFS{"index.html": {Data: []byte("<html>")}}, func(hd http.Header) { hd.Set("X-Frame-Options", "DENY") })
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", strings.NewReader("x")))
	if rec.Code != http.StatusNotFound {
		t.Errorf("POST / answered %d, want 404", rec.Code)
	}
	if rec.Header().Get("X-Frame-Options") != "DENY" {
		t.Error("the security headers are not set")
	}
	if _, err := NewHandler(fstest.MapFS{"a.js": {Data: []byte("x")}}, nil); err == nil {
		t.Error("a build without index.html was accepted")
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"":                    false,
		"gzip":                true,
		"GZIP":                true,
		"deflate, gzip;q=1.0": true,
		"gzip;q=0":            false,
		"gzip; q=0.000, *":    false,
		"br, *;q=0.1":         true,
		"*;q=0":               false,
		"identity":            false,
		"gzip;q=0.5, br":      true,
		"x-gzip":              false,
	} {
		if got := AcceptsGzip(h); got != want {
			t.Errorf("AcceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestCompressJSON(t *testing.T) {
	big := `{"machines":[` + strings.Repeat(`{"name":"worker","role":"worker"},`, 100) + `{}]}`
	h := CompressJSON(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, big)
		case "/small":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/text":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, big)
		case "/error":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, big)
		case "/stream":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, big)
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, big)
		}
	}))

	resp := get(t, h, "/big", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" || string(body(t, resp)) != big {
		t.Errorf("a large JSON answer is not gzipped (or not intact): %v", resp.Header)
	}
	if resp.ContentLength <= 0 || resp.ContentLength >= int64(len(big))/2 {
		t.Errorf("Content-Length %d for %d bytes of JSON", resp.ContentLength, len(big))
	}
	resp = get(t, h, "/error", "gzip")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Encoding") != "gzip" || string(body(t, resp)) != big {
		t.Errorf("an error answer lost its status or body: %d %v", resp.StatusCode, resp.Header)
	}
	for _, p := range []string{"/small", "/text"} {
		resp := get(t, h, p, "gzip")
		if resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s: gzipped, want it sent as it is", p)
		}
	}
	resp = get(t, h, "/stream", "gzip")
	if resp.Header.Get("Content-Encoding") != "" || string(body(t, resp)) != big+big {
		t.Errorf("a streamed answer (it flushes) was gzipped or cut: %v", resp.Header)
	}
	resp = get(t, h, "/big", "")
	if resp.Header.Get("Content-Encoding") != "" || string(body(t, resp)) != big {
		t.Error("gzipped for a client that does not accept it")
	}
}
