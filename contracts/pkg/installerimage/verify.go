package installerimage

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/verify"
)

// How cosign stores a keyless signature of an image, and the one form this
// package reads. cosign v3 signs in the Sigstore bundle format by default
// (--new-bundle-format defaults to true: sigstore/cosign
// cmd/cosign/cli/options/sign.go). `cosign sign` then signs a DSSE envelope
// whose payload is an in-toto statement with the image's manifest digest as
// its subject and the predicate type https://sigstore.dev/cosign/sign/v1
// (signDigestBundle in cmd/cosign/cli/sign/sign.go; pkg/types/predicate.go),
// and pushes the bundle as an OCI 1.1 referrer of that digest: a manifest
// whose subject is the image, whose artifactType is the bundle media type,
// whose config is the empty descriptor, and whose one layer is the bundle
// JSON (WriteAttestationNewBundleFormat and WriteReferrer in
// pkg/oci/remote/write.go). A registry without the referrers API gets the
// referrers tag schema (the index tagged sha256-<hex>) instead, which
// go-containerregistry's remote.Referrers reads as well. cosign's verifier
// reads it back the same way: every referrer whose manifest has exactly one
// layer of a sigstore bundle media type, bundle version 0.3 or later
// (GetBundles in pkg/cosign/verify.go, Bundle in pkg/oci/remote/signatures.go).
//
// The legacy form (a simple-signing payload in an image tagged
// sha256-<hex>.sig, cosign's default before v3) is not read; an image signed
// only that way is refused as unsigned, with a hint.
const (
	// BundleMediaType is the media type of a Sigstore bundle, version 0.3.
	BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// CosignSignPredicateType is the in-toto predicate type of `cosign sign`
	// in the bundle format; other attestations of the image do not count as
	// its signature.
	CosignSignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	// GitHubActionsIssuer is the OIDC issuer of GitHub Actions' workflow tokens.
	GitHubActionsIssuer = "https://token.actions.githubusercontent.com"

	bundleMediaTypePrefix = "application/vnd.dev.sigstore.bundle"
	// maxReferrers bounds how many referrers of one image are read.
	maxReferrers = 64
	// maxBundleSize bounds one bundle; cosign's are a few kilobytes.
	maxBundleSize = 1 << 20
)

// Identity is the signer a signature must come from: the subject alternative
// name and the OIDC issuer Fulcio wrote into the signing certificate.
type Identity struct {
	// SubjectRegexp matches the whole subject alternative name; for a GitHub
	// Actions workflow it is the workflow's URI at a ref,
	// https://github.com/OWNER/REPO/.github/workflows/FILE@REF.
	SubjectRegexp string
	// Issuer is the OIDC issuer, matched exactly.
	Issuer string
}

// ReleaseIdentity is Ichor's release workflow: .github/workflows/release.yml
// of github.com/maeshinshin/ichor, run for a tag, signing through GitHub
// Actions' OIDC token.
func ReleaseIdentity() Identity {
	return Identity{
		SubjectRegexp: `^https://github\.com/maeshinshin/ichor/\.github/workflows/release\.yml@refs/tags/[^@]+$`,
		Issuer:        GitHubActionsIssuer,
	}
}

func (i Identity) String() string {
	return fmt.Sprintf("subject matching %s, issuer %s", i.SubjectRegexp, i.Issuer)
}

func (i Identity) certificateIdentity() (verify.CertificateIdentity, error) {
	if i.SubjectRegexp == "" || i.Issuer == "" {
		return verify.CertificateIdentity{}, errors.New("the signer identity needs both a subject pattern and an issuer")
	}

	if _, err := regexp.Compile(i.SubjectRegexp); err != nil {
		return verify.CertificateIdentity{}, fmt.Errorf("the signer's subject pattern %q: %w", i.SubjectRegexp, err)
	}

	return verify.NewShortCertificateIdentity(i.Issuer, "", "", i.SubjectRegexp)
}

// Policy is what a signature must satisfy.
type Policy struct {
	// Identity is the signer.
	Identity Identity
	// Trust is the Sigstore the signature is checked against; nil is the
	// embedded public-good root (PublicGood).
	Trust *Trust
}

// ReleasePolicy is the policy of Ichor's own releases: signed by the release
// workflow, against the embedded Sigstore public-good root.
func ReleasePolicy() Policy {
	return Policy{Identity: ReleaseIdentity()}
}

// Signature is a verified signature of an image.
type Signature struct {
	// Image is repository@digest.
	Image string
	// Subject is the signer's subject alternative name (for GitHub Actions,
	// the workflow's URI at the ref it ran for).
	Subject string
	// Issuer is the signer's OIDC issuer.
	Issuer string
	// SignedAt is the earliest verified time of the signature: the
	// transparency log's integrated time or a signed timestamp.
	SignedAt time.Time
}

// Reason is why Verify refused an image.
type Reason string

// The three refusals.
const (
	// Unsigned: no cosign signature refers to the image.
	Unsigned Reason = "Unsigned"
	// Tampered: a signature refers to the image but does not verify for its
	// digest against the trusted root (the image, the tag or the signature
	// changed after signing, or it was signed by another Sigstore).
	Tampered Reason = "Tampered"
	// WrongSigner: a signature verifies for the digest, but its signer is not
	// the policy's identity.
	WrongSigner Reason = "WrongSigner"
)

// Sentinel errors, one per Reason, for errors.Is.
var (
	ErrUnsigned    = errors.New("installer image is not signed")
	ErrTampered    = errors.New("installer image signature does not verify for its digest")
	ErrWrongSigner = errors.New("installer image is not signed by the release workflow")
)

// Refusal is Verify's decision against an image.
type Refusal struct {
	// Reason is which of the three checks failed.
	Reason Reason
	// Image is repository@digest.
	Image string
	// Detail is what was found, for the person reading the error.
	Detail string
}

// Error says what is wrong and what to do.
func (r *Refusal) Error() string {
	switch r.Reason {
	case Unsigned:
		return fmt.Sprintf("installer image %s is not signed: %s; run only an image Ichor's release workflow built and signed, or, for a build nobody signs, set spec.installerSignature: skip (ichor upgrade ichor --skip-signature-check), which is recorded", r.Image, r.Detail)
	case Tampered:
		return fmt.Sprintf("installer image %s has a signature that does not verify for its digest (%s): the image, its tag or the signature changed after signing, or another Sigstore signed it; do not run it, and check where the tag points", r.Image, r.Detail)
	case WrongSigner:
		return fmt.Sprintf("installer image %s is not signed by Ichor's release workflow: %s; use an image of an Ichor release, or check spec.installerRepository", r.Image, r.Detail)
	}

	return fmt.Sprintf("installer image %s: %s", r.Image, r.Detail)
}

// Unwrap returns the sentinel error of the reason.
func (r *Refusal) Unwrap() error {
	switch r.Reason {
	case Unsigned:
		return ErrUnsigned
	case Tampered:
		return ErrTampered
	case WrongSigner:
		return ErrWrongSigner
	}

	return nil
}

// Verify checks that ref (repository@sha256:<hex>) carries a keyless cosign
// signature that verifies offline against the policy's Sigstore root and
// comes from the policy's identity. Only the registry is contacted: the
// certificate chain, the transparency log entry (its inclusion proof and
// promise) and the timestamps are all checked against the trusted root.
//
// An error is a *Refusal when the image was read and judged (errors.Is with
// ErrUnsigned, ErrTampered or ErrWrongSigner tells which); any other error
// means the registry could not be read or the policy is unusable.
func Verify(ctx context.Context, ref string, policy Policy, reg Registry) (*Signature, error) {
	d, err := name.NewDigest(ref)
	if err != nil || !digestPattern.MatchString(d.DigestStr()) {
		return nil, fmt.Errorf("%q is not repository@sha256:<64 hex digits>: resolve the image to its digest first", ref)
	}

	image := d.Context().Name() + "@" + d.DigestStr()

	digest, err := hex.DecodeString(strings.TrimPrefix(d.DigestStr(), "sha256:"))
	if err != nil {
		return nil, fmt.Errorf("digest of %s: %w", image, err)
	}

	trust := policy.Trust
	if trust == nil {
		if trust, err = PublicGood(); err != nil {
			return nil, err
		}
	}

	identity, err := policy.Identity.certificateIdentity()
	if err != nil {
		return nil, err
	}

	verifier, err := trust.verifier()
	if err != nil {
		return nil, err
	}

	found, others, err := referrerBundles(ctx, d, reg)
	if err != nil {
		return nil, err
	}

	j := judgement{image: image, want: policy.Identity.String(), others: others}

	for _, f := range found {
		if sig := j.judge(verifier, identity, digest, f); sig != nil {
			return sig, nil
		}
	}

	return nil, j.refusal(ctx, d, reg)
}

func (t *Trust) verifier() (*verify.Verifier, error) {
	// Keyless signing as cosign does it against the public-good instance:
	// a Fulcio certificate, logged in Rekor, its time observed by the log
	// (integrated time) or a timestamp authority. cosign itself asks for one
	// log entry, an SCT, and the log's or a TSA's time
	// (CheckOpts.verificationOptions in sigstore/cosign pkg/cosign/verify.go).
	opts := []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1)}
	if t.requireSCT {
		opts = append(opts, verify.WithSignedCertificateTimestamps(1))
	}

	v, err := verify.NewVerifier(t.material, opts...)
	if err != nil {
		return nil, fmt.Errorf("the Sigstore verifier: %w", err)
	}

	return v, nil
}

// foundBundle is one Sigstore bundle attached to the image.
type foundBundle struct {
	// manifest is the digest of the referrer manifest that carries it.
	manifest string
	raw      []byte
	// unread says why raw was not read.
	unread error
}

// judgement collects why the bundles of an image failed.
type judgement struct {
	image       string
	want        string
	tampered    []string
	wrongSigner []string
	// others counts attachments that are not cosign signatures.
	others int
}

// judge verifies one bundle and returns the signature when the bundle is a
// cosign signature of the digest by the identity; otherwise it records why
// not and returns nil.
func (j *judgement) judge(verifier *verify.Verifier, identity verify.CertificateIdentity, digest []byte, f foundBundle) *Signature {
	if f.unread != nil {
		j.tamper(f, f.unread)

		return nil
	}

	var b bundle.Bundle
	if err := b.UnmarshalJSON(f.raw); err != nil {
		j.tamper(f, fmt.Errorf("not a Sigstore bundle: %w", err))

		return nil
	}

	// cosign reads bundles of version 0.3 or later only (Bundle in
	// sigstore/cosign pkg/oci/remote/signatures.go).
	if !b.MinVersion("v0.3") {
		j.tamper(f, errors.New("bundle version older than 0.3"))

		return nil
	}

	content, err := b.VerificationContent()
	if err != nil {
		j.tamper(f, err)

		return nil
	}

	if content.Certificate() == nil {
		j.wrongSigner = append(j.wrongSigner, "signed with a public key, not by a keyless certificate")

		return nil
	}

	// The identity is checked below, after the signature, so that a valid
	// signature by someone else reads as such rather than as tampering.
	res, err := verifier.Verify(&b, verify.NewPolicy(verify.WithArtifactDigest("sha256", digest), verify.WithoutIdentitiesUnsafe()))
	if err != nil {
		j.tamper(f, err)

		return nil
	}

	if res.Statement == nil || res.Statement.GetPredicateType() != CosignSignPredicateType || res.Signature == nil || res.Signature.Certificate == nil {
		j.others++ // an attestation of another kind (provenance, SBOM): not a signature

		return nil
	}

	cert := *res.Signature.Certificate
	if err := identity.Verify(cert); err != nil {
		j.wrongSigner = append(j.wrongSigner, fmt.Sprintf("signed by %s (issuer %s), where the policy wants %s", cert.SubjectAlternativeName, cert.Issuer, j.want))

		return nil
	}

	sig := &Signature{Image: j.image, Subject: cert.SubjectAlternativeName, Issuer: cert.Issuer}
	for _, ts := range res.VerifiedTimestamps {
		if sig.SignedAt.IsZero() || ts.Timestamp.Before(sig.SignedAt) {
			sig.SignedAt = ts.Timestamp
		}
	}

	return sig
}

func (j *judgement) tamper(f foundBundle, err error) {
	j.tampered = append(j.tampered, fmt.Sprintf("the bundle in referrer %s: %v", f.manifest, err))
}

// refusal picks the most telling failure: a valid signature by another
// signer, then a signature that does not verify, then none at all.
func (j *judgement) refusal(ctx context.Context, d name.Digest, reg Registry) *Refusal {
	switch {
	case len(j.wrongSigner) > 0:
		return &Refusal{Reason: WrongSigner, Image: j.image, Detail: strings.Join(j.wrongSigner, "; ")}
	case len(j.tampered) > 0:
		return &Refusal{Reason: Tampered, Image: j.image, Detail: strings.Join(j.tampered, "; ")}
	}

	detail := "no cosign signature (a Sigstore bundle attached as an OCI referrer) refers to it"
	if j.others > 0 {
		detail += fmt.Sprintf(" (%d other attachment(s) are not cosign signatures)", j.others)
	}

	// A hint for an image signed the old way: cosign before v3 pushed the
	// signature as an image tagged sha256-<hex>.sig (SignatureTag in
	// sigstore/cosign pkg/oci/remote/remote.go).
	legacy := d.Context().Tag(strings.Replace(d.DigestStr(), ":", "-", 1) + ".sig")
	if _, err := remote.Head(legacy, reg.options(ctx)...); err == nil {
		detail += "; it has a signature in cosign's legacy format (tag " + legacy.TagStr() + "), which Ichor does not read: sign it with cosign v3, which attaches a Sigstore bundle"
	}

	return &Refusal{Reason: Unsigned, Image: j.image, Detail: detail}
}

// referrerBundles reads the Sigstore bundles attached to d as OCI referrers
// (the referrers API, or the referrers tag schema where the registry lacks
// it). It returns the bundles and how many referrers were something else.
func referrerBundles(ctx context.Context, d name.Digest, reg Registry) ([]foundBundle, int, error) {
	opts := reg.options(ctx)

	idx, err := remote.Referrers(d, opts...)
	if err != nil {
		return nil, 0, registryError(d.String(), err, "check the digest; the registry must serve OCI referrers (or the referrers tag schema)")
	}

	im, err := idx.IndexManifest()
	if err != nil {
		return nil, 0, registryError(d.String(), err, "the registry's list of referrers is unreadable")
	}

	var (
		found  []foundBundle
		others int
	)

	for i, desc := range im.Manifests {
		if i == maxReferrers {
			others += len(im.Manifests) - i

			break
		}

		mref := d.Context().Digest(desc.Digest.String())

		got, err := remote.Get(mref, opts...)
		if err != nil {
			return nil, 0, registryError(mref.String(), err, "the registry lists a referrer it cannot serve")
		}

		m, err := v1.ParseManifest(bytes.NewReader(got.Manifest))
		if err != nil || len(m.Layers) != 1 || !strings.HasPrefix(string(m.Layers[0].MediaType), bundleMediaTypePrefix) {
			others++ // an SBOM, a legacy attestation, anything but a bundle

			continue
		}

		f := foundBundle{manifest: desc.Digest.String()}

		if m.Layers[0].Size > maxBundleSize {
			f.unread = fmt.Errorf("a bundle of %d bytes, larger than any signature", m.Layers[0].Size)
		} else if f.raw, err = readBlob(d.Context().Digest(m.Layers[0].Digest.String()), opts); err != nil {
			return nil, 0, registryError(mref.String(), err, "the registry lists a signature it cannot serve")
		}

		found = append(found, f)
	}

	return found, others, nil
}

// readBlob reads a blob, checked against its digest, at most maxBundleSize bytes.
func readBlob(ref name.Digest, opts []remote.Option) ([]byte, error) {
	l, err := remote.Layer(ref, opts...)
	if err != nil {
		return nil, err
	}

	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close() //nolint:errcheck // a read-only stream

	return io.ReadAll(io.LimitReader(rc, maxBundleSize))
}
