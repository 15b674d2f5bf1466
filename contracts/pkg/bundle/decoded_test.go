package bundle_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// TestDecodeKeepsBundleButHandsOutCopies: decoding the same bytes again
// gives an equal bundle, and each caller its own parts, so that a rotation
// that replaces a CA in its copy (bundle.WithNewCAs) does not change what
// the next Decode returns; other bytes or another contract are decoded on
// their own.
func TestDecodeKeepsBundleButHandsOutCopies(t *testing.T) {
	b, err := bundle.Generate(secrets.NewFixedClock(now), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	data, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}

	first, err := bundle.Decode(data, "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	osCA := string(first.Certs.OS.Crt)
	first.Certs.OS = nil
	first.Cluster.ID = "changed by a caller"
	first.Secrets.BootstrapToken = "changed by a caller"

	second, err := bundle.Decode(data, "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	if second.Certs.OS == nil || string(second.Certs.OS.Crt) != osCA || second.Cluster.ID != b.Cluster.ID || second.Secrets.BootstrapToken != b.Secrets.BootstrapToken {
		t.Fatal("a caller's change to its decoded bundle reached the next Decode of the same bytes")
	}

	rotated, err := bundle.WithNewCAs(second, now, "v1.14", bundle.CASet{Talos: true})
	if err != nil {
		t.Fatal(err)
	}

	third, err := bundle.Decode(data, "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	if string(rotated.Certs.OS.Crt) == osCA || string(third.Certs.OS.Crt) != osCA || string(second.Certs.OS.Crt) != osCA {
		t.Fatal("a CA rotation's new CA reached the bundle Decode keeps, or did not replace the CA in the rotated copy")
	}

	// Bytes that do not validate are refused every time, never kept.
	for range 2 {
		if _, err := bundle.Decode(data[:len(data)/2], "v1.14"); err == nil {
			t.Fatal("half a bundle decoded")
		}
	}
}

// BenchmarkDecode is the decode of a cluster's bundle at each look at a
// machine (the controller's machinestate.Load): kept after the first.
func BenchmarkDecode(b *testing.B) {
	bun, err := bundle.Generate(secrets.NewFixedClock(now), "v1.14")
	if err != nil {
		b.Fatal(err)
	}

	data, err := bundle.Encode(bun)
	if err != nil {
		b.Fatal(err)
	}

	for b.Loop() {
		if _, err := bundle.Decode(data, "v1.14"); err != nil {
			b.Fatal(err)
		}
	}
}
