package talos

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// TestDialErrorsNeverQuoteTheTalosconfig feeds DialTalosconfig broken talosconfigs that
// carry a recognisable secret and checks that no error repeats it.
func TestDialErrorsNeverQuoteTheTalosconfig(t *testing.T) {
	b, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	admin, err := b.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		t.Fatal(err)
	}

	good := clientconfig.NewConfig("foreign", []string{"192.0.2.1"}, b.Certs.OS.Crt, admin)
	ctxOf := func(c *clientconfig.Config) *clientconfig.Context { return c.Contexts["foreign"] }

	// The allowed neighbour: the talosconfig `talosctl config` writes parses.
	if _, _, err := ParseTalosconfig(mustBytes(t, good)); err != nil {
		t.Fatalf("a good talosconfig was refused: %v", err)
	}

	const secret = "SECRET-KEY-MATERIAL-DO-NOT-LEAK"

	for name, mutate := range map[string]func(*clientconfig.Config) []byte{
		"yaml": func(*clientconfig.Config) []byte {
			return []byte("context: foreign\ncontexts:\n  foreign:\n    endpoints: " + secret + "\n    key: [" + secret)
		},
		"yaml type": func(*clientconfig.Config) []byte {
			return []byte("context: foreign\ncontexts: " + secret + "\n")
		},
		"key not base64": func(c *clientconfig.Config) []byte { ctxOf(c).Key = secret + "!!"; return mustBytes(t, c) },
		"key not a key": func(c *clientconfig.Config) []byte {
			ctxOf(c).Key = base64.StdEncoding.EncodeToString([]byte(secret))
			return mustBytes(t, c)
		},
		"ca not a cert": func(c *clientconfig.Config) []byte {
			ctxOf(c).CA = base64.StdEncoding.EncodeToString([]byte(secret))
			return mustBytes(t, c)
		},
		"no context":      func(c *clientconfig.Config) []byte { c.Context = "other-" + secret; return mustBytes(t, c) },
		"no current":      func(c *clientconfig.Config) []byte { c.Context = ""; return mustBytes(t, c) },
		"missing crt":     func(c *clientconfig.Config) []byte { ctxOf(c).Crt = ""; return mustBytes(t, c) },
		"a key somewhere": func(c *clientconfig.Config) []byte { ctxOf(c).Crt = ctxOf(c).Key; return mustBytes(t, c) },
	} {
		t.Run(name, func(t *testing.T) {
			c := clientconfig.NewConfig("foreign", []string{"192.0.2.1"}, b.Certs.OS.Crt, admin)

			_, err := DialTalosconfig(context.Background(), "127.0.0.1", 1, mutate(c))
			if err == nil {
				t.Fatal("a broken talosconfig was accepted")
			}

			for _, leak := range [][]byte{[]byte(secret), admin.Key, []byte(ctxOf(good).Key), []byte(ctxOf(good).Crt)} {
				if strings.Contains(err.Error(), string(leak)) {
					t.Fatalf("the error quotes the talosconfig: %v", err)
				}
			}
		})
	}
}

func mustBytes(t *testing.T, c *clientconfig.Config) []byte {
	t.Helper()

	out, err := c.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return out
}
