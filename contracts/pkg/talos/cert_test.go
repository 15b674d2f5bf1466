package talos

import (
	"bytes"
	stdx509 "crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// TestDialerKeepsItsClientCertificateForHalfItsLife: Dialer hands out the
// certificate it issued for a CA during the first half of its life (no new
// key and signature per dial), issues a new one after, and one of another
// CA for another bundle; each is an os:admin certificate its CA signed.
func TestDialerKeepsItsClientCertificateForHalfItsLife(t *testing.T) {
	gen := func() *secrets.Bundle {
		b, err := bundle.Generate(secrets.NewClock(), "v1.14")
		if err != nil {
			t.Fatal(err)
		}

		return b
	}

	a, other := gen(), gen()
	d := &Dialer{CertTTL: time.Hour}

	leaf := func(b *secrets.Bundle) []byte {
		c, err := d.clientCert(b)
		if err != nil {
			t.Fatal(err)
		}

		if c.Leaf == nil || !slices.Equal(c.Leaf.Subject.Organization, []string{string(role.Admin)}) {
			t.Fatalf("not an os:admin certificate: %+v", c.Leaf)
		}

		if got := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore); got < time.Hour || got > time.Hour+time.Minute {
			t.Fatalf("a certificate for %s, want CertTTL (1h)", got)
		}

		if err := c.Leaf.CheckSignatureFrom(caOf(t, b)); err != nil {
			t.Fatalf("not signed by the bundle's OS CA: %v", err)
		}

		return c.Certificate[0]
	}

	first := leaf(a)
	if !bytes.Equal(leaf(a), first) {
		t.Fatal("a second dial issued a new certificate")
	}

	if bytes.Equal(leaf(other), first) {
		t.Fatal("another bundle's dial got the first bundle's certificate")
	}

	// Past half its life, a new one.
	ca := osCAKey(a)

	d.mu.Lock()
	kept, ok := d.certs[ca]
	if !ok || time.Until(kept.until) > 31*time.Minute {
		d.mu.Unlock()
		t.Fatalf("the certificate is kept until %s, want half of CertTTL from now", kept.until)
	}

	kept.until = time.Now().Add(-time.Second)
	d.certs[ca] = kept
	d.mu.Unlock()

	if bytes.Equal(leaf(a), first) {
		t.Fatal("a certificate past half its life was handed out again")
	}
}

func caOf(t *testing.T, b *secrets.Bundle) *stdx509.Certificate {
	t.Helper()

	blk, _ := pem.Decode(b.Certs.OS.Crt)
	if blk == nil {
		t.Fatal("the OS CA is not PEM")
	}

	c, err := stdx509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return c
}
