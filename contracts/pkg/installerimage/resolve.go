// Package installerimage finds the installer image an Ichor upgrade runs and
// checks that Ichor's release workflow signed it, before the installer Job
// exists (architecture "Upgrades", the Ichor paragraph; issue #27).
//
// Resolve turns installerRepository:version into repository@digest, or takes
// the pinned digest of spec.installerDigest. Verify reads the cosign
// signature of that digest from the registry and checks it offline against a
// Sigstore trusted root: the Sigstore public-good root embedded in the binary
// by default, or another one (the test Sigstore of the test world). A refusal
// says which of three things went wrong: the image carries no signature, a
// signature does not verify for this digest, or the signer is not the release
// workflow.
//
// The controller, ichor-ui's backend and the CLI (--local) call the same two
// functions, so a refusal reads the same everywhere.
package installerimage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// Registry is how the registry is reached. The zero value reads anonymously
// (a public repository) over the default transport.
type Registry struct {
	// Keychain supplies credentials for a private repository; nil reads
	// anonymously.
	Keychain authn.Keychain
	// Transport carries the requests; nil is go-containerregistry's default.
	Transport http.RoundTripper
}

func (r Registry) options(ctx context.Context) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithUserAgent("ichor")}
	if r.Keychain != nil {
		opts = append(opts, remote.WithAuthFromKeychain(r.Keychain))
	}

	if r.Transport != nil {
		opts = append(opts, remote.WithTransport(r.Transport))
	}

	return opts
}

// Image is an installer image named by digest, the only way a Job runs it.
type Image struct {
	// Repository is the image repository, for example ghcr.io/maeshinshin/ichor-installer.
	Repository string
	// Digest is the manifest digest, sha256:<64 hex>.
	Digest string
	// Tag is the tag the digest was read from; empty for a pinned digest.
	Tag string
}

// Reference is repository@digest, the image a Job names.
func (i Image) Reference() string {
	return i.Repository + "@" + i.Digest
}

var digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Resolve returns the installer image of an Ichor version: the digest
// repository:tag names now, where the tag is install.ImageTag(version). An
// empty repository is the release's own (install.InstallerRepository). When
// pinned is set (spec.installerDigest, sha256:<hex>) the tag is not read:
// the pinned digest is looked up in the repository instead, so a typo
// fails here rather than as a Job that cannot pull its image.
//
// The digest is the one of the manifest the tag names (an image index for a
// multi-platform image), which is what cosign signs.
func Resolve(ctx context.Context, repository, version, pinned string, reg Registry) (Image, error) {
	if repository == "" {
		repository = install.InstallerRepository
	}

	repo, err := name.NewRepository(repository)
	if err != nil {
		return Image{}, fmt.Errorf("installer repository %q is not an image repository (%w): name one such as %s", repository, err, install.InstallerRepository)
	}

	if pinned != "" {
		if !digestPattern.MatchString(pinned) {
			return Image{}, fmt.Errorf("installer digest %q is not sha256:<64 lowercase hex digits>: copy the digest the release notes give, or leave it empty to read the tag", pinned)
		}

		ref := repo.Digest(pinned)
		if _, err := remote.Head(ref, reg.options(ctx)...); err != nil {
			return Image{}, registryError(ref.String(), err, "check spec.installerDigest against the repository, or leave it empty to read the tag")
		}

		return Image{Repository: repo.Name(), Digest: pinned}, nil
	}

	tag := install.ImageTag(version)

	ref, err := name.NewTag(repo.Name() + ":" + tag)
	if err != nil {
		return Image{}, fmt.Errorf("version %q gives no valid image tag (%w): name a released version such as v0.2.0", version, err)
	}

	desc, err := remote.Get(ref, reg.options(ctx)...)
	if err != nil {
		return Image{}, registryError(ref.String(), err, "check that the version is released and that the installer repository is right")
	}

	return Image{Repository: repo.Name(), Digest: desc.Digest.String(), Tag: tag}, nil
}

// registryError says what a failed registry read means and what to do. The
// registry's own error (status, code and message; never credentials) is kept.
func registryError(ref string, err error, fix string) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("installer image %s does not exist (%w): %s", ref, err, fix)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("the registry refused to show installer image %s (%w): provide pull credentials for the repository, or make it public", ref, err)
		}
	}

	return fmt.Errorf("cannot read installer image %s from its registry (%w): check that the registry is reachable from here", ref, err)
}
