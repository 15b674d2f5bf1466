package restjson_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/restjson"
)

// requests are the UI API's request messages (package ichor.v1, *Request,
// and the REST bodies grpc-gateway makes for methods with path parameters).
func requests(t testing.TB) []protoreflect.MessageType {
	t.Helper()

	_ = ichorv1.File_ichor_v1_cluster_proto // the package registers its types

	var out []protoreflect.MessageType

	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		name := mt.Descriptor().FullName()
		if name.Parent() == "ichor.v1" && (strings.HasSuffix(string(name.Name()), "Request") || strings.HasSuffix(string(name.Name()), "Body")) {
			out = append(out, mt)
		}

		return true
	})

	if len(out) < 40 {
		t.Fatalf("found %d request messages of the UI API; the registry is not the API's", len(out))
	}

	return out
}

// FuzzDecodeRequests decodes arbitrary JSON into every request message of
// the UI API with the REST mapping's marshaler: no body panics the decoder,
// and a body it accepts encodes and decodes to an equal message.
func FuzzDecodeRequests(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"valuesYaml":"hubble: {enabled: true}"}`,
		`{"authentication":{"ichorUsers":true,"external":{"issuerUrl":"https://x","audiences":["a"]}}}`,
		`{"addresses":["10.0.0.1"],"subnets":["10.0.0.0/24"]}`,
		`{"name":"vera","roles":["viewer"],"displayName":"Vera"}`,
		`{"settings":{"idTokenLifetime":"5m"},"resourceVersion":"7"}`,
		`{"pageSize":50,"pageToken":"abc","unknownField":[1,2,{"x":null}]}`,
		`{"duration":"1h","force":true,"reason":"\u0000"}`,
		`[1,2]`,
		`null`,
	} {
		f.Add([]byte(s))
	}

	m := restjson.Marshaler()

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mt := range requests(t) {
			msg := mt.New().Interface()
			if err := m.Unmarshal(data, msg); err != nil {
				continue
			}

			out, err := m.Marshal(msg)
			if err != nil {
				t.Fatalf("%s: an accepted body does not encode: %v", mt.Descriptor().FullName(), err)
			}

			again := mt.New().Interface()
			if err := m.Unmarshal(out, again); err != nil {
				t.Fatalf("%s: its own encoding %s does not decode: %v", mt.Descriptor().FullName(), out, err)
			}

			if !proto.Equal(msg, again) {
				t.Fatalf("%s: the message changes across its JSON %s", mt.Descriptor().FullName(), out)
			}
		}
	})
}
