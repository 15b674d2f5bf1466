package installerimage_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage/imagetest"
)

// registries runs a test against a registry with the OCI referrers API and
// one without it (signatures then live in the referrers tag schema).
func registries(t *testing.T, test func(t *testing.T, w *imagetest.World)) {
	t.Helper()

	for _, api := range []bool{true, false} {
		label := "referrers-api"
		if !api {
			label = "referrers-tag-schema"
		}

		t.Run(label, func(t *testing.T) {
			test(t, imagetest.NewWorld(t, api))
		})
	}
}

func TestResolveReadsTheDigestTheVersionTagNames(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	d1 := w.Push("v0.1.0")
	d2 := w.Push("v0.2.0")

	for version, want := range map[string]name.Digest{"v0.1.0": d1, "v0.2.0": d2, "v0.2.0+abc1234": d2} {
		img, err := installerimage.Resolve(t.Context(), w.Repo.Name(), version, "", w.Registry())
		if err != nil {
			t.Fatalf("Resolve(%s): %v", version, err)
		}

		if img.Reference() != want.String() {
			t.Errorf("Resolve(%s) = %s, want %s", version, img.Reference(), want)
		}

		if img.Tag != strings.Split(version, "+")[0] {
			t.Errorf("Resolve(%s).Tag = %q", version, img.Tag)
		}
	}
}

func TestResolveTakesThePinnedDigestInsteadOfTheTag(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	pinned := w.Push("v0.2.0")
	w.Push("v0.2.0") // the tag moves on; the pin does not

	img, err := installerimage.Resolve(t.Context(), w.Repo.Name(), "v0.2.0", pinned.DigestStr(), w.Registry())
	if err != nil {
		t.Fatal(err)
	}

	if img.Reference() != pinned.String() || img.Tag != "" {
		t.Errorf("Resolve with a pin = %+v, want %s and no tag", img, pinned)
	}
}

func TestResolveSaysWhatIsWrongAndWhatToDo(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	w.Push("v0.2.0")

	absent := "sha256:" + strings.Repeat("ab", 32)

	for _, tc := range []struct {
		name, repository, version, pinned string
		want                              []string
	}{
		{"an unreleased version", w.Repo.Name(), "v9.9.9", "", []string{w.Repo.Name() + ":v9.9.9", "does not exist", "released"}},
		{"a pin the repository lacks", w.Repo.Name(), "v0.2.0", absent, []string{w.Repo.Name() + "@" + absent, "does not exist", "spec.installerDigest"}},
		{"a malformed pin", w.Repo.Name(), "v0.2.0", "sha256:abc", []string{`"sha256:abc"`, "64 lowercase hex"}},
		{"a malformed repository", "Not/A/Repo", "v0.2.0", "", []string{`"Not/A/Repo"`, "not an image repository"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := installerimage.Resolve(t.Context(), tc.repository, tc.version, tc.pinned, w.Registry())
			if err == nil {
				t.Fatal("Resolve succeeded")
			}

			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestResolveSaysWhenTheRegistryRefuses: a registry that refuses the read
// (no pull rights) is told apart from an image that does not exist.
func TestResolveSaysWhenTheRegistryRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"errors":[{"code":"DENIED","message":"no pull rights"}]}`))
	}))
	t.Cleanup(srv.Close)

	repo := strings.TrimPrefix(srv.URL, "http://") + "/" + imagetest.RepoPath

	_, err := installerimage.Resolve(t.Context(), repo, "v0.2.0", "", installerimage.Registry{})
	if err == nil || !strings.Contains(err.Error(), "refused to show installer image "+repo+":v0.2.0") || !strings.Contains(err.Error(), "pull credentials") {
		t.Errorf("Resolve against a refusing registry: %v", err)
	}
}

func TestVerifyAcceptsTheReleaseWorkflowsSignature(t *testing.T) {
	registries(t, func(t *testing.T, w *imagetest.World) {
		w.Push("v0.1.0")
		d := w.Push("v0.2.0")
		w.Attach(d, w.Sign(d, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

		img, err := installerimage.Resolve(t.Context(), w.Repo.Name(), "v0.2.0", "", w.Registry())
		if err != nil {
			t.Fatal(err)
		}

		sig, err := installerimage.Verify(t.Context(), img.Reference(), w.Policy(), w.Registry())
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}

		if sig.Image != d.String() || sig.Subject != imagetest.ReleaseSubject || sig.Issuer != installerimage.GitHubActionsIssuer || sig.SignedAt.IsZero() {
			t.Errorf("Verify = %+v", sig)
		}
	})
}

// TestVerifyAcceptsARekorV2SignatureDatedByATimestampAuthority: a signature
// logged in a Rekor v2 log, which gives no integrated time, verifies on the
// timestamp authority's signed time.
func TestVerifyAcceptsARekorV2SignatureDatedByATimestampAuthority(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	d := w.Push("v0.2.0")
	w.Attach(d, w.SignRekorV2(d, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

	sig, err := installerimage.Verify(t.Context(), d.String(), w.Policy(), w.Registry())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}

	if sig.Subject != imagetest.ReleaseSubject || sig.SignedAt.IsZero() {
		t.Errorf("Verify = %+v", sig)
	}

	other := w.Push("v0.2.1")
	w.Attach(other, w.SignRekorV2(other, "https://github.com/someone/ichor/.github/workflows/release.yml@refs/tags/v0.2.1", installerimage.GitHubActionsIssuer))

	_, err = installerimage.Verify(t.Context(), other.String(), w.Policy(), w.Registry())
	expectRefusal(t, err, installerimage.WrongSigner, installerimage.ErrWrongSigner, "someone/ichor")
}

func TestVerifyRefusesAnUnsignedImage(t *testing.T) {
	registries(t, func(t *testing.T, w *imagetest.World) {
		d1 := w.Push("v0.1.0")
		d2 := w.Push("v0.2.0")
		w.Attach(d2, w.Sign(d2, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer)) // a signed neighbour changes nothing

		_, err := installerimage.Verify(t.Context(), d1.String(), w.Policy(), w.Registry())
		expectRefusal(t, err, installerimage.Unsigned, installerimage.ErrUnsigned, "is not signed", "spec.installerSignature: skip")
	})
}

// TestVerifyRefusesATamperedImage: a signature that refers to the image but
// was made for another digest, or altered after signing.
func TestVerifyRefusesATamperedImage(t *testing.T) {
	registries(t, func(t *testing.T, w *imagetest.World) {
		genuine := w.Push("v0.2.0")
		bundle := w.Sign(genuine, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer)
		w.Attach(genuine, bundle)

		t.Run("the tag moved to another image carrying the release's signature", func(t *testing.T) {
			evil := w.Push("v0.2.0")
			w.Attach(evil, bundle) // a signature is public: anyone can attach it

			img, err := installerimage.Resolve(t.Context(), w.Repo.Name(), "v0.2.0", "", w.Registry())
			if err != nil {
				t.Fatal(err)
			}

			if img.Reference() != evil.String() {
				t.Fatalf("the tag names %s, want the moved-to %s", img.Reference(), evil)
			}

			_, err = installerimage.Verify(t.Context(), img.Reference(), w.Policy(), w.Registry())
			expectRefusal(t, err, installerimage.Tampered, installerimage.ErrTampered, "does not verify for its digest", "do not run it")
		})

		t.Run("the signed statement rewritten to name another image", func(t *testing.T) {
			evil := w.Push("v0.2.1")
			w.Attach(evil, rewriteSubject(t, bundle, evil))

			_, err := installerimage.Verify(t.Context(), evil.String(), w.Policy(), w.Registry())
			expectRefusal(t, err, installerimage.Tampered, installerimage.ErrTampered, "does not verify for its digest")
		})

		t.Run("a signature by another Sigstore", func(t *testing.T) {
			other, err := ca.NewVirtualSigstore()
			if err != nil {
				t.Fatal(err)
			}

			d := w.Push("v0.2.2")
			w.Attach(d, w.SignWith(other, imagetest.Statement(installerimage.CosignSignPredicateType, d), imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

			_, err = installerimage.Verify(t.Context(), d.String(), w.Policy(), w.Registry())
			expectRefusal(t, err, installerimage.Tampered, installerimage.ErrTampered, "another Sigstore")
		})

		// The genuine image still verifies after all this.
		if _, err := installerimage.Verify(t.Context(), genuine.String(), w.Policy(), w.Registry()); err != nil {
			t.Errorf("the genuine image: %v", err)
		}
	})
}

func TestVerifyRefusesASignatureFromAnotherIdentity(t *testing.T) {
	registries(t, func(t *testing.T, w *imagetest.World) {
		for _, tc := range []struct{ name, subject, issuer string }{
			{"another repository's release workflow", "https://github.com/someone/ichor/.github/workflows/release.yml@refs/tags/v0.2.0", installerimage.GitHubActionsIssuer},
			{"another workflow of Ichor's repository", "https://github.com/maeshinshin/ichor/.github/workflows/ci.yml@refs/tags/v0.2.0", installerimage.GitHubActionsIssuer},
			{"the release workflow run on a branch", "https://github.com/maeshinshin/ichor/.github/workflows/release.yml@refs/heads/main", installerimage.GitHubActionsIssuer},
			{"a lookalike repository", "https://github.com/maeshinshin/ichor-fork/.github/workflows/release.yml@refs/tags/v0.2.0", installerimage.GitHubActionsIssuer},
			{"the release workflow's subject from another issuer", imagetest.ReleaseSubject, "https://accounts.example.com"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				d := w.Push("v0.2.0")
				w.Attach(d, w.Sign(d, tc.subject, tc.issuer))

				_, err := installerimage.Verify(t.Context(), d.String(), w.Policy(), w.Registry())
				expectRefusal(t, err, installerimage.WrongSigner, installerimage.ErrWrongSigner, "not signed by Ichor's release workflow", tc.subject, tc.issuer)
			})
		}
	})
}

// TestVerifyCountsOnlyCosignSignatures: an attestation of the image by the
// release workflow (build provenance, say) is not its signature.
func TestVerifyCountsOnlyCosignSignatures(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	d := w.Push("v0.2.0")
	w.Attach(d, w.SignWith(w.Sigstore, imagetest.Statement("https://slsa.dev/provenance/v1", d), imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

	_, err := installerimage.Verify(t.Context(), d.String(), w.Policy(), w.Registry())
	expectRefusal(t, err, installerimage.Unsigned, installerimage.ErrUnsigned, "1 other attachment")
}

// TestVerifyNamesALegacySignature: an image signed only in cosign's legacy
// form (an image tagged sha256-<hex>.sig) is unsigned for Ichor, and the
// refusal says why.
func TestVerifyNamesALegacySignature(t *testing.T) {
	w := imagetest.NewWorld(t, false)
	d := w.Push("v0.2.0")

	legacy, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}

	w.Tag(strings.Replace(d.DigestStr(), ":", "-", 1)+".sig", legacy)

	_, err = installerimage.Verify(t.Context(), d.String(), w.Policy(), w.Registry())
	expectRefusal(t, err, installerimage.Unsigned, installerimage.ErrUnsigned, "legacy format", "cosign v3")
}

func TestVerifyNeedsADigest(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	w.Push("v0.2.0")

	_, err := installerimage.Verify(t.Context(), w.Repo.Tag("v0.2.0").String(), w.Policy(), w.Registry())
	if err == nil || errors.Is(err, installerimage.ErrUnsigned) || !strings.Contains(err.Error(), "resolve the image to its digest first") {
		t.Errorf("Verify of a tag: %v", err)
	}
}

// TestVerifyWantsACertificateTimestampWhenTheRootNamesACTLog: against a
// root that names a CT log (as the public-good root does), a certificate
// without a signed certificate timestamp does not verify.
func TestVerifyWantsACertificateTimestampWhenTheRootNamesACTLog(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	d := w.Push("v0.2.0")
	w.Attach(d, w.Sign(d, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

	withCT, err := installerimage.TrustFromJSON(imagetest.TrustedRootJSON(t, w.Sigstore, true))
	if err != nil {
		t.Fatal(err)
	}

	policy := w.Policy()
	policy.Trust = withCT

	_, err = installerimage.Verify(t.Context(), d.String(), policy, w.Registry())
	expectRefusal(t, err, installerimage.Tampered, installerimage.ErrTampered, "certificate timestamp")

	if _, err := installerimage.Verify(t.Context(), d.String(), w.Policy(), w.Registry()); err != nil {
		t.Errorf("without the CT log in the root: %v", err)
	}
}

// TestEmbeddedPublicGoodRootIsTheDefault: the embedded root parses, and a
// policy without a root of its own uses it, so a signature of the test
// Sigstore does not verify.
func TestEmbeddedPublicGoodRootIsTheDefault(t *testing.T) {
	if _, err := installerimage.PublicGood(); err != nil {
		t.Fatal(err)
	}

	w := imagetest.NewWorld(t, true)
	d := w.Push("v0.2.0")
	w.Attach(d, w.Sign(d, imagetest.ReleaseSubject, installerimage.GitHubActionsIssuer))

	_, err := installerimage.Verify(t.Context(), d.String(), installerimage.ReleasePolicy(), w.Registry())
	expectRefusal(t, err, installerimage.Tampered, installerimage.ErrTampered)
}

func expectRefusal(t *testing.T, err error, reason installerimage.Reason, sentinel error, says ...string) {
	t.Helper()

	var r *installerimage.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("error %v is not a refusal", err)
	}

	if r.Reason != reason || !errors.Is(err, sentinel) {
		t.Fatalf("refused as %s (%v), want %s", r.Reason, err, reason)
	}

	t.Logf("refused: %v", err)

	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not say %q", err, s)
		}
	}
}

// rewriteSubject changes the digest the bundle's signed statement names to
// d's, leaving signature, certificate and log entry as they were.
func rewriteSubject(t *testing.T, b []byte, d name.Digest) []byte {
	t.Helper()

	var pb protobundle.Bundle
	if err := protojson.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}

	env := pb.GetDsseEnvelope()
	key := []byte(`"sha256":"`)

	n := bytes.Index(env.GetPayload(), key)
	if n < 0 {
		t.Fatalf("no digest in %s", env.GetPayload())
	}

	start := n + len(key)
	end := start + hex.EncodedLen(sha256.Size)
	env.Payload = bytes.Join([][]byte{env.GetPayload()[:start], []byte(strings.TrimPrefix(d.DigestStr(), "sha256:")), env.GetPayload()[end:]}, nil)

	out, err := protojson.Marshal(&pb)
	if err != nil {
		t.Fatal(err)
	}

	return out
}
