package server

import (
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// Encodings returns the cached encodings of the large, shared responses (the
// list of machines): made once per change, written to every client.
type Encodings interface {
	// CachedWire is the protobuf encoding of v, when v is a shared response.
	CachedWire(v any) (b []byte, ok bool, err error)
	// CachedJSON is the REST encoding of v made with marshal, plain and
	// gzip-compressed, when v is a shared response.
	CachedJSON(v any, marshal func(any) ([]byte, error)) (b, gz []byte, ok bool, err error)
}

// cachingCodec is gRPC's proto codec, but for a shared response it sends the
// encoding made once instead of encoding it again for each call.
type cachingCodec struct {
	base  encoding.CodecV2
	cache Encodings
}

func (c cachingCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok, err := c.cache.CachedWire(v)
	if err != nil {
		return nil, err
	}
	if ok {
		// A SliceBuffer is never recycled: the shared bytes stay intact.
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.base.Marshal(v)
}

func (c cachingCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

func (c cachingCodec) Name() string { return c.base.Name() }

// listMachinesREST serves GET /api/v1/machines without the in-memory gRPC
// hop the other REST calls take: the same authentication and service call,
// the same errors (runtime.HTTPError) and the same JSON (the gateway's
// marshaler), but the shared list's JSON is made once per change.
func (s *Server) listMachinesREST(w http.ResponseWriter, r *http.Request) {
	ctx := metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", r.Header.Get("Authorization")))
	ctx, err := s.authenticate(ctx)
	if err != nil {
		runtime.HTTPError(r.Context(), s.gw, s.marshaler, w, r, err)
		return
	}
	req := &ichorv1.ListMachinesRequest{}
	if err := runtime.PopulateQueryParameters(req, r.URL.Query(), utilities.NewDoubleArray(nil)); err != nil {
		runtime.HTTPError(ctx, s.gw, s.marshaler, w, r, err)
		return
	}
	resp, err := s.opts.Machines.ListMachines(ctx, req)
	if err != nil {
		runtime.HTTPError(ctx, s.gw, s.marshaler, w, r, err)
		return
	}
	b, gz, ok, err := s.opts.Encodings.CachedJSON(resp, s.marshaler.Marshal)
	if err == nil && !ok {
		b, err = s.marshaler.Marshal(resp)
	}
	if err != nil {
		runtime.HTTPError(ctx, s.gw, s.marshaler, w, r, err)
		return
	}
	w.Header().Set("Content-Type", s.marshaler.ContentType(resp))
	w.Header().Add("Vary", "Accept-Encoding")
	if gz != nil && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		b = gz
	}
	_, _ = w.Write(b)
}

// acceptsGzip reports whether the client takes a gzip-encoded response.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
				return true
			}
		}
	}
	return false
}
