// Package imagetest is the test world of installer images: a real OCI
// registry on loopback (go-containerregistry's in-process registry behind
// httptest) and a test Sigstore (sigstore-go's virtual Fulcio, Rekor and
// timestamp authority) that signs images the way cosign v3 does. The tests of
// installerimage and of the deliverables that run an Ichor upgrade (the
// controller's ichor operation) share it; nothing outside tests imports it.
package imagetest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
)

// The world holds installer images in its registry and signs them with its
// Sigstore, whose trusted root the tests hand to Verify as JSON, the way a
// test build embeds it. Signatures are stored the way cosign v3 stores them
// (see the comment on installerimage.BundleMediaType's block).

const (
	// RepoPath is the installer repository's path in the world's registry.
	RepoPath = "maeshinshin/ichor-installer"
	// ReleaseSubject is the certificate subject of Ichor's release workflow
	// run for the tag v0.2.0.
	ReleaseSubject = "https://github.com/maeshinshin/ichor/.github/workflows/release.yml@refs/tags/v0.2.0"
	// emptyMediaType is the OCI empty descriptor's media type, the config of
	// cosign's referrer manifest.
	emptyMediaType = "application/vnd.oci.empty.v1+json"
)

// World is a registry and a test Sigstore.
type World struct {
	t testing.TB
	// Repo is the installer repository in the registry (127.0.0.1:PORT/RepoPath).
	Repo name.Repository
	// Sigstore is the test Sigstore that signs.
	Sigstore *ca.VirtualSigstore
	// Trust is its trusted root, as Verify takes it; TrustJSON the same as JSON.
	Trust     *installerimage.Trust
	TrustJSON []byte
}

// NewWorld starts a registry, with the OCI referrers API or without it
// (clients then keep the referrers tag schema), and a test Sigstore.
func NewWorld(t testing.TB, referrersAPI bool) *World {
	t.Helper()

	srv := httptest.NewServer(registry.New(
		registry.WithReferrersSupport(referrersAPI),
		registry.Logger(log.New(io.Discard, "", 0)),
	))
	t.Cleanup(srv.Close)

	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://") + "/" + RepoPath)
	if err != nil {
		t.Fatal(err)
	}

	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}

	rootJSON := TrustedRootJSON(t, vs, false)

	trust, err := installerimage.TrustFromJSON(rootJSON)
	if err != nil {
		t.Fatal(err)
	}

	return &World{t: t, Repo: repo, Sigstore: vs, Trust: trust, TrustJSON: rootJSON}
}

// TrustedRootJSON writes the test Sigstore's trusted root: its Fulcio, its
// Rekor log and its timestamp authority, and its CT log when withCTLog is
// set. The virtual Fulcio embeds no signed certificate timestamps, so a root
// that names the CT log refuses its certificates.
func TrustedRootJSON(t testing.TB, vs *ca.VirtualSigstore, withCTLog bool) []byte {
	t.Helper()

	var ctlogs map[string]*root.TransparencyLog
	if withCTLog {
		ctlogs = rawLogIDs(t, vs.CTLogs())
	}

	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), ctlogs, vs.TimestampingAuthorities(), rawLogIDs(t, vs.RekorLogs()))
	if err != nil {
		t.Fatal(err)
	}

	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// rawLogIDs copies logs with their raw key IDs: the virtual Sigstore keeps
// the hex of a log's key ID as its ID, where a trusted root carries the raw
// bytes (and keys its map by their hex).
func rawLogIDs(t testing.TB, logs map[string]*root.TransparencyLog) map[string]*root.TransparencyLog {
	t.Helper()

	out := map[string]*root.TransparencyLog{}

	for id, l := range logs {
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}

		c := *l
		c.ID = raw
		out[id] = &c
	}

	return out
}

// Policy is the release policy against the world's Sigstore.
func (w *World) Policy() installerimage.Policy {
	return installerimage.Policy{Identity: installerimage.ReleaseIdentity(), Trust: w.Trust}
}

// Registry is how the world's registry is reached: plain HTTP on loopback,
// which go-containerregistry uses for 127.0.0.1 by itself.
func (w *World) Registry() installerimage.Registry {
	return installerimage.Registry{}
}

// Push pushes a small image of random layers under tag and returns its digest.
func (w *World) Push(tag string) name.Digest {
	w.t.Helper()

	img, err := random.Image(512, 2)
	if err != nil {
		w.t.Fatal(err)
	}

	w.Tag(tag, img)

	d, err := img.Digest()
	if err != nil {
		w.t.Fatal(err)
	}

	return w.Repo.Digest(d.String())
}

// Tag points tag at img (pushing it), as a re-push of a tag does.
func (w *World) Tag(tag string, img v1.Image) {
	w.t.Helper()

	if err := remote.Write(w.Repo.Tag(tag), img); err != nil {
		w.t.Fatal(err)
	}
}

// Statement is the in-toto statement `cosign sign` signs in the bundle
// format: the image's manifest digest as subject, cosign's sign predicate.
func Statement(predicateType string, d name.Digest) []byte {
	return fmt.Appendf(nil, `{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":%q}}],"predicateType":%q,"predicate":{}}`,
		strings.TrimPrefix(d.DigestStr(), "sha256:"), predicateType)
}

// Sign signs d as `cosign sign` does, by subject (the certificate's subject
// alternative name) through issuer, and returns the Sigstore bundle.
func (w *World) Sign(d name.Digest, subject, issuer string) []byte {
	w.t.Helper()

	return w.SignWith(w.Sigstore, Statement(installerimage.CosignSignPredicateType, d), subject, issuer)
}

// SignWith makes a v0.3 Sigstore bundle of the DSSE envelope of payload,
// signed with a certificate of vs's Fulcio, logged in its Rekor (inclusion
// proof and promise) and timestamped by its timestamp authority: what cosign
// v3 writes against the public-good instance today.
func (w *World) SignWith(vs *ca.VirtualSigstore, payload []byte, subject, issuer string) []byte {
	w.t.Helper()

	// The leaf certificate is valid from now for ten minutes; the log's
	// time must fall inside (sigstore-go's own Attest uses the same offset).
	entity, err := vs.AttestAtTime(subject, issuer, payload, time.Now().Add(5*time.Minute), true)
	if err != nil {
		w.t.Fatal(err)
	}

	return w.bundle(vs, entity, false)
}

// SignRekorV2 signs d as SignWith does, but logs the signature in a Rekor v2
// log (a hashedrekord v0.0.2 entry with a checkpoint, no integrated time),
// so the signed timestamp alone dates it: what cosign writes once Sigstore's
// signing configuration points it at a Rekor v2 shard.
func (w *World) SignRekorV2(d name.Digest, subject, issuer string) []byte {
	w.t.Helper()

	entity, err := w.Sigstore.AttestHashedRekordV2(subject, issuer, Statement(installerimage.CosignSignPredicateType, d))
	if err != nil {
		w.t.Fatal(err)
	}

	return w.bundle(w.Sigstore, entity, true)
}

// bundle writes a signed entity as a v0.3 Sigstore bundle.
func (w *World) bundle(vs *ca.VirtualSigstore, entity *ca.TestEntity, rekorV2 bool) []byte {
	w.t.Helper()

	vc, err := entity.VerificationContent()
	if err != nil {
		w.t.Fatal(err)
	}

	sc, err := entity.SignatureContent()
	if err != nil {
		w.t.Fatal(err)
	}

	env := sc.(*bundle.Envelope).RawEnvelope()

	entries, err := entity.TlogEntries()
	if err != nil {
		w.t.Fatal(err)
	}

	stamps, err := entity.Timestamps()
	if err != nil {
		w.t.Fatal(err)
	}

	tle := proto.Clone(entries[0].TransparencyLogEntry()).(*protorekor.TransparencyLogEntry)
	if !rekorV2 {
		// The virtual Rekor v1's entry lacks its kind and its signed entry
		// timestamp (the inclusion promise) in proto form; add both.
		tle.KindVersion = &protorekor.KindVersion{Kind: "dsse", Version: "0.0.1"}

		set, err := vs.RekorSignPayload(tlog.RekorPayload{
			Body:           base64.StdEncoding.EncodeToString(tle.GetCanonicalizedBody()),
			IntegratedTime: tle.GetIntegratedTime(),
			LogIndex:       tle.GetLogIndex(),
			LogID:          hex.EncodeToString(tle.GetLogId().GetKeyId()),
		})
		if err != nil {
			w.t.Fatal(err)
		}

		tle.InclusionPromise = &protorekor.InclusionPromise{SignedEntryTimestamp: set}
	}

	body, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		w.t.Fatal(err)
	}

	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		w.t.Fatal(err)
	}

	pb := &protobundle.Bundle{
		MediaType: installerimage.BundleMediaType,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_Certificate{
				Certificate: &protocommon.X509Certificate{RawBytes: vc.Certificate().Raw},
			},
			TlogEntries: []*protorekor.TransparencyLogEntry{tle},
			TimestampVerificationData: &protobundle.TimestampVerificationData{
				Rfc3161Timestamps: []*protocommon.RFC3161SignedTimestamp{{SignedTimestamp: stamps[0]}},
			},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload:     body,
			PayloadType: env.PayloadType,
			Signatures:  []*protodsse.Signature{{Sig: sig, Keyid: env.Signatures[0].KeyID}},
		}},
	}

	b, err := protojson.Marshal(pb)
	if err != nil {
		w.t.Fatal(err)
	}

	return b
}

// Attach pushes b as an OCI 1.1 referrer of d, laid out as cosign's
// WriteAttestationNewBundleFormat and WriteReferrer lay it out
// (sigstore/cosign pkg/oci/remote/write.go): an empty config, the bundle as
// the one layer, the bundle media type as artifactType, d as subject.
func (w *World) Attach(d name.Digest, b []byte) {
	w.t.Helper()

	subject, err := remote.Head(d)
	if err != nil {
		w.t.Fatal(err)
	}

	config := static.NewLayer([]byte("{}"), emptyMediaType)
	layer := static.NewLayer(b, installerimage.BundleMediaType)

	for _, l := range []v1.Layer{config, layer} {
		if err := remote.WriteLayer(w.Repo, l); err != nil {
			w.t.Fatal(err)
		}
	}

	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  installerimage.BundleMediaType,
		Config:        descriptor(w.t, config, installerimage.BundleMediaType),
		Layers:        []v1.Descriptor{descriptor(w.t, layer, "")},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations: map[string]string{
			"dev.sigstore.bundle.content":       "dsse-envelope",
			"dev.sigstore.bundle.predicateType": installerimage.CosignSignPredicateType,
		},
	}

	raw, err := json.Marshal(m)
	if err != nil {
		w.t.Fatal(err)
	}

	ref := w.Repo.Digest(fmt.Sprintf("sha256:%x", sha256.Sum256(raw)))
	if err := remote.Put(ref, rawManifest(raw)); err != nil {
		w.t.Fatal(err)
	}
}

func descriptor(t testing.TB, l v1.Layer, artifactType string) v1.Descriptor {
	t.Helper()

	mt, err := l.MediaType()
	if err != nil {
		t.Fatal(err)
	}

	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}

	size, err := l.Size()
	if err != nil {
		t.Fatal(err)
	}

	return v1.Descriptor{MediaType: mt, Digest: d, Size: size, ArtifactType: artifactType}
}

// rawManifest is an OCI image manifest pushed as written.
type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
