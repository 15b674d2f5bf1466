package talos_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

func TestMessage(t *testing.T) {
	key := "LS0tLS1CRUdJTiBFRDI1NTE5IFBSSVZBVEUgS0VZLS0tLS0KTUM0Q0FRQXdCUVlESzJWd0JDSUVJQQ=="
	pem := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrYSSNQFaA2Hwf1duRSxKtLYX5CX6C5O0Y0xIhE\n-----END EC PRIVATE KEY-----" //nolint:gosec // not a key: a shape the scrubber must catch

	cases := []struct {
		name      string
		err       error
		want      string
		forbidden []string
	}{
		{"gRPC status keeps code and message", status.Error(codes.InvalidArgument, "1 error occurred:\n\t* machine.network.hostname: invalid"),
			"InvalidArgument: 1 error occurred: * machine.network.hostname: invalid", nil},
		{"plain error", errors.New("connection refused"), "connection refused", nil},
		{"base64 key material", status.Error(codes.InvalidArgument, "cannot decode key "+key+" in cluster.secretboxEncryptionSecret"),
			"InvalidArgument: cannot decode key [redacted] in cluster.secretboxEncryptionSecret", []string{key[:20]}},
		{"PEM block", fmt.Errorf("apply: %w", status.Error(codes.InvalidArgument, "bad certificate "+pem+" in machine.ca")),
			"InvalidArgument: bad certificate [redacted] in machine.ca", []string{"MHcCAQEE", "PRIVATE KEY"}},
		{"cut PEM block", errors.New("yaml: " + pem[:60]), "yaml: [redacted]", []string{"MHcC"}},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := talos.Message(c.err)
			if got != c.want {
				t.Errorf("Message = %q, want %q", got, c.want)
			}

			for _, f := range c.forbidden {
				if strings.Contains(got, f) {
					t.Errorf("Message %q leaks %q", got, f)
				}
			}
		})
	}

	long := talos.Message(errors.New(strings.Repeat("a.b ", 1000)))
	if len(long) > 1024 || !strings.HasSuffix(long, "...") {
		t.Errorf("a long message is %d bytes, ends %q", len(long), long[len(long)-5:])
	}
}
