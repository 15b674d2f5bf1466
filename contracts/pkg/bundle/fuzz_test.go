package bundle_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// FuzzDecode feeds Decode arbitrary bytes (seeded with a real bundle and
// broken copies of it): no input panics it; a bundle it accepts encodes and
// decodes to the same bytes again.
func FuzzDecode(f *testing.F) {
	b, err := bundle.Generate(secrets.NewFixedClock(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)), "v1.14")
	if err != nil {
		f.Fatal(err)
	}

	good, err := bundle.Encode(b)
	if err != nil {
		f.Fatal(err)
	}

	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(bytes.Replace(good, []byte("crt:"), []byte("crt: [1, 2]\n  x:"), 1))
	f.Add([]byte("cluster: {id: 1}\n"))
	f.Add([]byte("- a\n- b\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := bundle.Decode(data, "v1.14")
		if err != nil {
			return
		}

		enc, err := bundle.Encode(b)
		if err != nil {
			t.Fatalf("a decoded bundle does not encode: %v", err)
		}

		b2, err := bundle.Decode(enc, "v1.14")
		if err != nil {
			t.Fatalf("an encoded bundle does not decode: %v", err)
		}

		enc2, err := bundle.Encode(b2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("the bundle changes across encode and decode (%v)", err)
		}
	})
}

// FuzzDecodeErrorsQuoteNoValue puts an arbitrary value where a secrets
// bundle holds keys and certificates, in well- and ill-typed places: Decode's
// error never quotes it (a bundle's values are secrets; errors reach logs
// and Events).
func FuzzDecodeErrorsQuoteNoValue(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add([]byte("-----BEGIN EC PRIVATE KEY-----"))
	f.Add([]byte("zz"))

	templates := []string{
		"cluster:\n  id: %[1]s\n  secret: %[1]s\nsecrets:\n  bootstraptoken: %[1]s\n",
		"cluster: %[1]s\n",
		"certs:\n  etcd:\n    crt: %[1]s\n    key: %[1]s\n",
		"certs:\n  os: [%[1]s]\n",
		"trustdinfo:\n  token: {%[1]s: 1}\n",
		"%[1]s\n",
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		value := fmt.Sprintf("Q%xQ", data) // hex: no YAML syntax, never a word of an error template
		for _, tpl := range templates {
			_, err := bundle.Decode([]byte(fmt.Sprintf(tpl, value)), "v1.14")
			if err != nil && strings.Contains(err.Error(), value) {
				t.Fatalf("Decode's error quotes a value of the input: %v", err)
			}
		}
	})
}
