package installerimage

import (
	"encoding/hex"
	"os"
	"testing"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/verify"
)

// TestPublicGoodVerifierAcceptsARealGitHubActionsSignature: the embedded
// root and the verifier's requirements (a log entry, an observed time, an
// SCT) accept a real signature made by a GitHub Actions release workflow on
// the public-good instance, and the identity policy tells that workflow from
// Ichor's. testdata/public-good-provenance.sigstore.json is the file
// examples/bundle-provenance.json of the Go module
// github.com/sigstore/sigstore-go v1.3.0 (sigstore-js's npm provenance for
// sigstore@1.3.0, signed by its release workflow).
func TestPublicGoodVerifierAcceptsARealGitHubActionsSignature(t *testing.T) {
	raw, err := os.ReadFile("testdata/public-good-provenance.sigstore.json")
	if err != nil {
		t.Fatal(err)
	}

	var b bundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}

	trust, err := PublicGood()
	if err != nil {
		t.Fatal(err)
	}

	if !trust.requireSCT {
		t.Error("the public-good root names CT logs, yet no SCT is required")
	}

	verifier, err := trust.verifier()
	if err != nil {
		t.Fatal(err)
	}

	// The statement's subject: the npm tarball's sha512.
	digest, err := hex.DecodeString("76176ffa33808b54602c7c35de5c6e9a4deb96066dba6533f50ac234f4f1f4c6b3527515dc17c06fbe2860030f410eee69ea20079bd3a2c6f3dcf3b329b10751")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		identity Identity
		ok       bool
	}{
		{"the workflow that signed it", Identity{SubjectRegexp: `^https://github\.com/sigstore/sigstore-js/\.github/workflows/release\.yml@refs/heads/main$`, Issuer: GitHubActionsIssuer}, true},
		{"Ichor's release workflow", ReleaseIdentity(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.identity.certificateIdentity()
			if err != nil {
				t.Fatal(err)
			}

			_, err = verifier.Verify(&b, verify.NewPolicy(verify.WithArtifactDigest("sha512", digest), verify.WithCertificateIdentity(id)))
			if (err == nil) != tc.ok {
				t.Errorf("verified: %v, want %v", err, tc.ok)
			}
		})
	}
}
