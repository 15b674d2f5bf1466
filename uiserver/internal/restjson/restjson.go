// Package restjson is how the UI API's REST mapping (grpc-gateway) reads
// and writes JSON: protojson, unknown fields ignored on the way in (a newer
// console talking to an older ichor-ui), unpopulated fields left out on the
// way out.
package restjson

import (
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
)

// Marshaler is the REST mapping's JSON marshaler.
func Marshaler() *runtime.JSONPb {
	return &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}
}
