package installerimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ManifestPath is where an installer image carries the install manifest its
// installer embeds: ko puts the main package's kodata directory at
// /var/run/ko, and installer/cmd/kodata/install.yaml is the manifest the
// binary embeds (a symbolic link to contracts/pkg/install/install.yaml, the
// file the release workflow names the images in by digest).
const ManifestPath = "var/run/ko/install.yaml"

// maxManifest bounds the manifest read from an image (today's is under 1 MiB).
const maxManifest = 32 << 20

// Manifest reads the install manifest the installer image ref
// (repository@sha256:...) carries at ManifestPath, from the last layer that
// has it. An image index is read through its first image: every platform's
// image carries the same manifest. `ichor upgrade ichor --local` installs
// it; the caller verifies the image's signature first.
func Manifest(ctx context.Context, ref string, reg Registry) ([]byte, error) {
	d, err := name.NewDigest(ref)
	if err != nil {
		return nil, fmt.Errorf("installer image %q is not repository@sha256:<digest>: %w", ref, err)
	}

	img, err := imageOf(ctx, d, reg)
	if err != nil {
		return nil, registryError(ref, err, "check that the image exists and can be read")
	}

	layers, err := img.Layers()
	if err != nil {
		return nil, registryError(ref, err, "check that the image exists and can be read")
	}

	for i := len(layers) - 1; i >= 0; i-- {
		data, found, err := fileInLayer(layers[i], ManifestPath)
		if err != nil {
			return nil, fmt.Errorf("reading layer %d of installer image %s: %w", i, ref, err)
		}

		if found {
			return data, nil
		}
	}

	return nil, fmt.Errorf("installer image %s carries no install manifest at /%s (it was not built by Ichor's release workflow, or predates it): "+
		"upgrade with `ichor upgrade ichor` (the installer Job) instead", ref, ManifestPath)
}

// imageOf is the image d names, or the first image of the index it names.
func imageOf(ctx context.Context, d name.Digest, reg Registry) (v1.Image, error) {
	desc, err := remote.Get(d, reg.options(ctx)...)
	if err != nil {
		return nil, err
	}

	if !desc.MediaType.IsIndex() {
		return desc.Image()
	}

	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}

	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}

	for _, m := range im.Manifests {
		if m.MediaType.IsImage() {
			return idx.Image(m.Digest)
		}
	}

	return nil, errors.New("the image index holds no image")
}

// fileInLayer reads the regular file at file (a path without the leading
// slash) from layer.
func fileInLayer(layer v1.Layer, file string) ([]byte, bool, error) {
	rc, err := layer.Uncompressed()
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = rc.Close() }()

	tr := tar.NewReader(rc)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}

		if err != nil {
			return nil, false, err
		}

		if strings.TrimPrefix(path.Clean("/"+h.Name), "/") != file || h.Typeflag != tar.TypeReg {
			continue
		}

		data, err := io.ReadAll(io.LimitReader(tr, maxManifest+1))
		if err != nil {
			return nil, false, err
		}

		if len(data) > maxManifest {
			return nil, false, fmt.Errorf("/%s is larger than %d bytes", file, maxManifest)
		}

		return data, true, nil
	}
}
