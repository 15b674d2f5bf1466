package installerimage_test

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage/imagetest"
)

// layerOf is an uncompressed layer of the files (path → content).
func layerOf(t *testing.T, files map[string]string) v1.Layer {
	t.Helper()

	var b bytes.Buffer

	tw := tar.NewWriter(&b)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}

		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}

	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	return static.NewLayer(b.Bytes(), types.OCIUncompressedLayer)
}

// TestManifest: the manifest an installer image carries at
// /var/run/ko/install.yaml is read from its last layer that has it, through
// an image index too; an image without one is refused naming the way out.
func TestManifest(t *testing.T) {
	w := imagetest.NewWorld(t, true)
	ctx := t.Context()

	img, err := mutate.AppendLayers(empty.Image,
		layerOf(t, map[string]string{"ko-app/ichor-installer": "binary", installerimage.ManifestPath: "kind: Old"}),
		layerOf(t, map[string]string{"./" + installerimage.ManifestPath: "kind: New", "var/run/ko/other.yaml": "kind: Other"}))
	if err != nil {
		t.Fatal(err)
	}

	w.Tag("v0.9.0", img)

	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}

	got, err := installerimage.Manifest(ctx, w.Repo.Digest(d.String()).String(), w.Registry())
	if err != nil || string(got) != "kind: New" {
		t.Fatalf("Manifest = %q, %v; want the last layer's", got, err)
	}

	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	if err := remote.WriteIndex(w.Repo.Tag("index"), idx); err != nil {
		t.Fatal(err)
	}

	id, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}

	if got, err := installerimage.Manifest(ctx, w.Repo.Digest(id.String()).String(), w.Registry()); err != nil || string(got) != "kind: New" {
		t.Fatalf("Manifest of the index = %q, %v; want its image's", got, err)
	}

	bare := w.Push("bare")

	_, err = installerimage.Manifest(ctx, bare.String(), w.Registry())
	if err == nil || !strings.Contains(err.Error(), "carries no install manifest at /var/run/ko/install.yaml") ||
		!strings.Contains(err.Error(), "`ichor upgrade ichor`") {
		t.Fatalf("Manifest of an image without one: %v", err)
	}
}
