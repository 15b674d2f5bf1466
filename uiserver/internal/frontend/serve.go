package frontend

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Cache-Control values of the console's files. Vite names every file under
// assets/ after a hash of its content, so a browser may keep it for a year
// without asking again; index.html names the current assets and is checked
// on every load (no-cache still lets the browser reuse it after a 304).
const (
	CacheImmutable  = "public, max-age=31536000, immutable"
	CacheRevalidate = "no-cache"
	// assetsDir holds the content-hashed files.
	assetsDir = "assets/"
	// minCompress is the smallest body worth gzipping: below it the gzip
	// header and the CPU cost outweigh the saving.
	minCompress = 1024
)

// file is one file of the build, with its gzipped form when that is smaller.
type file struct {
	name        string
	contentType string
	body, gz    []byte
	etag        string
	cache       string
}

// Handler serves a built single-page application: a file when it exists;
// index.html for any other path (the console's own routes), except under
// assets/, where a missing file is a 404 (an old page asking for an asset
// that a newer build replaced must not get HTML cached for a year). Every
// body is read and gzipped once, when the handler is made; a client that
// accepts gzip gets the gzipped body. headers, when not nil, sets the
// security headers of every answer.
type Handler struct {
	files   map[string]*file
	headers func(http.Header)
}

// NewHandler reads every file of files (the embedded build: a few hundred
// KiB) into memory with its gzipped form, ETag and Cache-Control.
func NewHandler(files fs.FS, headers func(http.Header)) (*Handler, error) {
	h := &Handler{files: map[string]*file{}, headers: headers}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &file{name: p, body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, cache: CacheRevalidate}
		f.contentType = mime.TypeByExtension(path.Ext(p))
		if f.contentType == "" {
			f.contentType = http.DetectContentType(body)
		}
		if strings.HasPrefix(p, assetsDir) {
			f.cache = CacheImmutable
		}
		if compressible(f.contentType) && len(body) >= minCompress {
			gz, err := gzipBytes(body)
			if err != nil {
				return err
			}
			if len(gz) < len(body) {
				f.gz = gz
			}
		}
		h.files[p] = f
		return nil
	})
	if err != nil {
		return nil, err
	}
	if h.files["index.html"] == nil {
		return nil, fs.ErrNotExist
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.headers != nil {
		h.headers(w.Header())
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	f := h.files[p]
	if f == nil || p == "" {
		if strings.HasPrefix(p, assetsDir) {
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "no such asset: reload the page for the current build", http.StatusNotFound)
			return
		}
		f = h.files["index.html"]
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("Cache-Control", f.cache)
	body, etag := f.body, f.etag
	if f.gz != nil {
		hd.Add("Vary", "Accept-Encoding")
		if AcceptsGzip(r.Header.Get("Accept-Encoding")) {
			hd.Set("Content-Encoding", "gzip")
			body, etag = f.gz, strings.TrimSuffix(f.etag, `"`)+`-gzip"`
		}
	}
	hd.Set("ETag", etag)
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(body))
}

// compressible reports whether a content type is text that gzip shrinks
// (images and fonts of the build are compressed already).
func compressible(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	switch strings.TrimSpace(ct) {
	case "text/html", "text/css", "text/javascript", "application/javascript", "application/json", "image/svg+xml", "text/plain":
		return true
	}
	return false
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AcceptsGzip reports whether an Accept-Encoding header accepts gzip: it
// names gzip (or *) without q=0 (RFC 9110 §12.5.3).
func AcceptsGzip(header string) bool {
	ok := false
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name != "gzip" && name != "*" {
			continue
		}
		q := 1.0
		for _, prm := range strings.Split(params, ";") {
			k, v, found := strings.Cut(strings.TrimSpace(prm), "=")
			if found && strings.EqualFold(strings.TrimSpace(k), "q") {
				q = parseQ(strings.TrimSpace(v))
			}
		}
		if name == "gzip" {
			return q > 0 // an explicit gzip entry decides
		}
		ok = q > 0
	}
	return ok
}

// parseQ reads a qvalue ("0", "0.5", "1.000"); anything unreadable is 0.
func parseQ(v string) float64 {
	if v == "" {
		return 0
	}
	whole, frac, _ := strings.Cut(v, ".")
	if whole != "0" && whole != "1" {
		return 0
	}
	if whole == "1" {
		return 1
	}
	for _, c := range frac {
		if c != '0' {
			return 0.5 // some positive weight: all that matters here
		}
	}
	return 0
}
