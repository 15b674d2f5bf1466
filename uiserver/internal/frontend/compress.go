package frontend

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
)

// maxBuffered is the most of an answer CompressJSON holds to gzip it; a
// larger one is sent as it is (the largest unary answers, a machine list of
// a big cluster, stay far below it).
const maxBuffered = 8 << 20

// CompressJSON gzips the JSON answers of next for clients that accept gzip.
// It holds the answer until the handler returns and then sends it gzipped
// when it is JSON of at least 1 KiB. A streamed answer (the machine watch,
// a log) flushes as it goes: at the first Flush the answer is sent as it is
// from then on, so that every message still reaches the browser at once.
func CompressJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !AcceptsGzip(r.Header.Get("Accept-Encoding")) || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		cw := &compressWriter{w: w, code: http.StatusOK}
		next.ServeHTTP(cw, r)
		cw.finish()
	})
}

// compressWriter buffers an answer until it ends (then maybe gzipped) or
// until it flushes or grows past maxBuffered (then passed through).
type compressWriter struct {
	w       http.ResponseWriter
	code    int
	wrote   bool // WriteHeader was called
	through bool // the answer goes out as it is
	buf     bytes.Buffer
}

func (c *compressWriter) Header() http.Header { return c.w.Header() }

func (c *compressWriter) WriteHeader(code int) {
	if c.through {
		c.w.WriteHeader(code)
		return
	}
	if c.wrote {
		return
	}
	c.wrote, c.code = true, code
}

func (c *compressWriter) Write(b []byte) (int, error) {
	if c.through {
		return c.w.Write(b)
	}
	if c.buf.Len()+len(b) > maxBuffered {
		if err := c.passThrough(); err != nil {
			return 0, err
		}
		return c.w.Write(b)
	}
	return c.buf.Write(b)
}

// Flush sends what is held, as it is, and everything after it too.
func (c *compressWriter) Flush() {
	if !c.through {
		_ = c.passThrough()
	}
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *compressWriter) Unwrap() http.ResponseWriter { return c.w }

func (c *compressWriter) passThrough() error {
	c.through = true
	c.w.WriteHeader(c.code)
	if c.buf.Len() == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf.Bytes())
	c.buf.Reset()
	return err
}

// finish sends a held answer: gzipped when it is JSON worth compressing.
func (c *compressWriter) finish() {
	if c.through {
		return
	}
	h := c.w.Header()
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	if c.buf.Len() < minCompress || strings.TrimSpace(ct) != "application/json" || h.Get("Content-Encoding") != "" ||
		c.code == http.StatusNoContent || c.code == http.StatusNotModified {
		_ = c.passThrough()
		return
	}
	gz, err := gzipFast(c.buf.Bytes())
	if err != nil {
		_ = c.passThrough()
		return
	}
	h.Set("Content-Encoding", "gzip")
	h.Set("Content-Length", strconv.Itoa(len(gz)))
	c.w.WriteHeader(c.code)
	_, _ = c.w.Write(gz)
}

// gzipFast compresses an answer made for one request: the default level,
// cheaper than the build's best compression.
func gzipFast(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
