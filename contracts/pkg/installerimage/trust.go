package installerimage

import (
	_ "embed" // the public-good trusted root
	"fmt"

	"github.com/sigstore/sigstore-go/pkg/root"
)

// publicGoodRoot is the Sigstore public-good trusted root
// (application/vnd.dev.sigstore.trustedroot+json;version=0.1): Fulcio's CA
// chains, Rekor's log key, the CT log keys that countersign Fulcio's
// certificates, and a timestamp authority. It is the file
// examples/trusted-root-public-good.json of the Go module
// github.com/sigstore/sigstore-go v1.3.0, byte for byte (sha256
// 4364d7724c04cc912ce2a6c45ed2610e8d8d1c4dc857fb500292738d4d9c8d2c); Sigstore
// publishes the live one as the TUF target trusted_root.json. It names the
// Rekor v1 log (rekor.sigstore.dev), which is where cosign v3 records a
// signature today, but not the Rekor v2 shards nor timestamp.sigstore.dev:
// a signature logged only in Rekor v2 does not verify against it. Replace
// the file when Sigstore's root changes (a key rotation or a new log).
//
//go:embed sigstore-public-good-trusted-root.json
var publicGoodRoot []byte

// Trust is the Sigstore a signature is checked against: its certificate
// authority, transparency logs, CT logs and timestamp authorities.
type Trust struct {
	material root.TrustedMaterial
	// requireSCT is true when the root names a CT log: Fulcio's certificates
	// then carry a signed certificate timestamp, and one must verify.
	requireSCT bool
}

// PublicGood is the Sigstore public-good root embedded in this build, the
// one Ichor's release workflow signs against.
func PublicGood() (*Trust, error) {
	t, err := TrustFromJSON(publicGoodRoot)
	if err != nil {
		return nil, fmt.Errorf("the embedded Sigstore root: %w", err)
	}

	return t, nil
}

// TrustFromJSON reads a Sigstore trusted root
// (application/vnd.dev.sigstore.trustedroot+json;version=0.1), such as the
// one a test Sigstore writes. Certificates must carry a signed certificate
// timestamp exactly when the root names a CT log.
func TrustFromJSON(rootJSON []byte) (*Trust, error) {
	tr, err := root.NewTrustedRootFromJSON(rootJSON)
	if err != nil {
		return nil, fmt.Errorf("not a Sigstore trusted root: %w", err)
	}

	if len(tr.FulcioCertificateAuthorities()) == 0 {
		return nil, fmt.Errorf("the Sigstore trusted root names no certificate authority, so no keyless signature can verify against it")
	}

	if len(tr.RekorLogs()) == 0 {
		return nil, fmt.Errorf("the Sigstore trusted root names no transparency log, so no keyless signature can verify against it")
	}

	return &Trust{material: tr, requireSCT: len(tr.CTLogs()) > 0}, nil
}
