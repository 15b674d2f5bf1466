package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/crdcheck"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage/imagetest"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// Issue 27: Ichor upgrades itself between two releases in the emulated
// cluster. Each release is built here the way the release workflow builds
// one: ichor-controller and ichor-ui as images of one layer holding the
// binary (ko's layout, /ko-app/<name>) pushed to a registry on loopback
// (go-containerregistry's registry), an install manifest naming those two by
// digest embedded in ichor-installer, whose image is pushed under the
// version's tag and signed keylessly by the release workflow's identity. The
// Sigstore is the test world's (sigstore-go's virtual Fulcio, Rekor and
// timestamp authority); its trusted root replaces the public-good root the
// binaries embed (go build -overlay over the embedded file: the code that
// verifies is the release's, only the root differs). talosemu's pod runner
// runs an image named by digest from the binary written for that digest, so
// a pod runs exactly the version its image is.

const (
	upgradeSubnet     = "127.0.213.0/24"
	upgradePodSubnet  = "127.213.0.0/24"
	upgradeCluster    = "selfup"
	rollbackSubnet    = "127.0.214.0/24"
	rollbackPodSubnet = "127.214.0.0/24"
	// fromVersion and toVersion are the two releases built.
	fromVersion = "v0.8.0"
	toVersion   = "v0.9.0"
	// versionVar is the variable the release's -ldflags set.
	versionVar = "github.com/maeshinshin/ichor/contracts/pkg/version.version"
	// addedField is the IchorInstallation field fromVersion's CRD lacks and
	// toVersion's adds: the additive CRD change the upgrade must apply.
	addedField = "defaultDriftPolicy"
	ichorCRD   = "ichorinstallations.ichor.maesh.dev"
)

// ichorRelease is one built release: the digests of its three images and the
// directory of its binaries (the first release built has its ichor CLI there).
type ichorRelease struct {
	version                   string
	bin                       string
	controller, ui, installer name.Digest
}

// releaseBuilder builds releases into one registry and Sigstore.
type releaseBuilder struct {
	t      *testing.T
	root   string
	reg    *imagetest.World
	podBin string // talosemu's --pod-bin-dir: a digest's binary goes to sha256/<hex>/
	dir    string
	trust  string // the test Sigstore's trusted root, as a file
	// cliBuilt is set once a release's ichor CLI is built (the first's).
	cliBuilt bool
}

func newReleaseBuilder(t *testing.T, podBin string) *releaseBuilder {
	t.Helper()

	root, err := repoRoot()
	testenv.Must(t, err)

	b := &releaseBuilder{t: t, root: root, reg: imagetest.NewWorld(t, true), podBin: podBin, dir: t.TempDir()}
	b.trust = filepath.Join(b.dir, "trusted-root.json")
	testenv.Must(t, os.WriteFile(b.trust, b.reg.TrustJSON, 0o600))

	return b
}

// repository is Ichor's repository of image n in the world's registry.
func (b *releaseBuilder) repository(n string) name.Repository {
	r, err := name.NewRepository(b.reg.Repo.RegistryStr() + "/maeshinshin/" + n)
	testenv.Must(b.t, err)

	return r
}

// build makes release version: its controller and ichor-ui images, then
// its installer (installer); editManifest changes its install manifest after
// the images are named by digest (nil keeps it).
func (b *releaseBuilder) build(version string, editManifest func(t *testing.T, manifest []byte) []byte) ichorRelease {
	b.t.Helper()

	rel := ichorRelease{version: version, bin: filepath.Join(b.dir, version)}
	testenv.Must(b.t, os.MkdirAll(rel.bin, 0o750))
	testenv.Must(b.t, b.goBuild(version, b.trustOverlay(), rel.bin, "ichor-controller", "ichor-ui"))

	rel.controller = b.push("ichor-controller", version, filepath.Join(rel.bin, "ichor-controller"), nil)
	rel.ui = b.push("ichor-ui", version, filepath.Join(rel.bin, "ichor-ui"), nil)

	// The CLI of the first release is the one the test runs (init needs a
	// CLI of the release it installs; later releases' CLIs are not run).
	names := []string{"ichor-installer"}
	if !b.cliBuilt {
		names, b.cliBuilt = append(names, "ichor"), true
	}

	return b.installer(rel, editManifest, names...)
}

// rebuild makes release version of the images of rel (no new controller or
// ichor-ui build) with its manifest changed by editManifest: a release
// whose manifest is broken. Only its installer is built, and pushed under
// version's tag.
func (b *releaseBuilder) rebuild(version string, rel ichorRelease, editManifest func(t *testing.T, manifest []byte) []byte) ichorRelease {
	b.t.Helper()

	out := ichorRelease{version: version, bin: filepath.Join(b.dir, version+"-of-"+rel.version), controller: rel.controller, ui: rel.ui}
	testenv.Must(b.t, os.MkdirAll(out.bin, 0o750))

	return b.installer(out, editManifest, "ichor-installer")
}

func (b *releaseBuilder) trustOverlay() map[string]string {
	return map[string]string{filepath.Join(b.root, "contracts", "pkg", "installerimage", "sigstore-public-good-trusted-root.json"): b.trust}
}

// installer writes rel's install manifest (this tree's, naming rel's
// controller and ichor-ui images by digest, then editManifest), builds the
// named binaries with it embedded, and pushes and signs the installer image.
func (b *releaseBuilder) installer(rel ichorRelease, editManifest func(t *testing.T, manifest []byte) []byte, names ...string) ichorRelease {
	t := b.t
	t.Helper()

	manifest := string(install.Manifest())
	for from, to := range map[string]name.Digest{
		"ghcr.io/maeshinshin/ichor-controller:latest": rel.controller,
		"ghcr.io/maeshinshin/ichor-ui:latest":         rel.ui,
	} {
		if !strings.Contains(manifest, "image: "+from) {
			t.Fatalf("the install manifest names no image %s", from)
		}

		manifest = strings.ReplaceAll(manifest, "image: "+from, "image: "+to.String())
	}

	data := []byte(manifest)
	if editManifest != nil {
		data = editManifest(t, data)
	}

	file := filepath.Join(rel.bin, "install.yaml")
	testenv.Must(t, os.WriteFile(file, data, 0o600))

	overlay := b.trustOverlay()
	overlay[filepath.Join(b.root, "contracts", "pkg", "install", "install.yaml")] = file
	testenv.Must(t, b.goBuild(rel.version, overlay, rel.bin, names...))

	// installer/cmd/kodata/install.yaml is the manifest the installer embeds.
	rel.installer = b.push("ichor-installer", rel.version, filepath.Join(rel.bin, "ichor-installer"), map[string][]byte{"install.yaml": data})
	b.reg.Attach(rel.installer, b.reg.Sign(rel.installer,
		"https://github.com/maeshinshin/ichor/.github/workflows/release.yml@refs/tags/"+rel.version, installerimage.GitHubActionsIssuer))

	return rel
}

// goBuild builds the named binaries of this tree at version with the files
// of overlay replaced (go build -overlay), two at a time.
func (b *releaseBuilder) goBuild(version string, overlay map[string]string, out string, names ...string) error {
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		return err
	}

	ovFile := filepath.Join(out, fmt.Sprintf("overlay-%d.json", len(overlay)))
	if err := os.WriteFile(ovFile, ov, 0o600); err != nil {
		return err
	}

	errs := make([]error, len(names))

	var wg sync.WaitGroup

	for i, n := range names {
		wg.Go(func() {
			bin := binaries[n]
			cmd := exec.CommandContext(context.Background(), "go", "build", "-overlay", ovFile, //nolint:gosec // our own packages
				"-ldflags", "-X "+versionVar+"="+version, "-o", filepath.Join(out, n), bin.pkg)
			cmd.Dir = filepath.Join(b.root, bin.module)

			if o, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("building %s %s: %w\n%s", n, version, err, o)
			}
		})
	}

	wg.Wait()

	return errors.Join(errs...)
}

// push pushes the image of one binary, as ko lays it out (one uncompressed
// layer with /ko-app/<binary>, the entrypoint, and the files of the main
// package's kodata directory under /var/run/ko), under tag, and writes the
// binary where talosemu runs that digest from.
func (b *releaseBuilder) push(binary, tag, file string, kodata map[string][]byte) name.Digest {
	t := b.t
	t.Helper()

	data, err := os.ReadFile(file)
	testenv.Must(t, err)

	var layer bytes.Buffer

	tw := tar.NewWriter(&layer)
	testenv.Must(t, tw.WriteHeader(&tar.Header{Name: "ko-app/", Typeflag: tar.TypeDir, Mode: 0o755}))
	testenv.Must(t, tw.WriteHeader(&tar.Header{Name: "ko-app/" + binary, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))}))
	_, err = tw.Write(data)
	testenv.Must(t, err)

	// ko's kodata directory of the main package, at /var/run/ko.
	for n, content := range kodata {
		testenv.Must(t, tw.WriteHeader(&tar.Header{Name: "var/run/ko/" + n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}))
		_, err = tw.Write(content)
		testenv.Must(t, err)
	}

	testenv.Must(t, tw.Close())

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, static.NewLayer(layer.Bytes(), types.OCIUncompressedLayer))
	testenv.Must(t, err)

	cf, err := img.ConfigFile()
	testenv.Must(t, err)

	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{"/ko-app/" + binary}}
	img, err = mutate.ConfigFile(img, cf)
	testenv.Must(t, err)

	repo := b.repository(binary)
	testenv.Must(t, remote.Write(repo.Tag(tag), img))

	h, err := img.Digest()
	testenv.Must(t, err)

	dir := filepath.Join(b.podBin, h.Algorithm, h.Hex)
	testenv.Must(t, os.MkdirAll(dir, 0o750))

	if err := os.Link(file, filepath.Join(dir, binary)); err != nil {
		testenv.Must(t, os.WriteFile(filepath.Join(dir, binary), data, 0o755)) //nolint:gosec // an executable
	}

	return repo.Digest(h.String())
}

// withoutField removes field from the spec.settings of the IchorInstallation
// CRD of manifest: an older release's CRD.
func withoutField(field string) func(*testing.T, []byte) []byte {
	return func(t *testing.T, manifest []byte) []byte {
		t.Helper()

		docs := strings.Split(string(manifest), "\n---\n")
		removed := 0

		for i, doc := range docs {
			if !strings.Contains(doc, "name: "+ichorCRD) {
				continue
			}

			u := &unstructured.Unstructured{}
			testenv.Must(t, yaml.Unmarshal([]byte(doc), &u.Object))

			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}

			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
			for j := range versions {
				v, _ := versions[j].(map[string]any)
				props := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "settings", "properties"}

				p, ok, _ := unstructured.NestedMap(v, props...)
				if !ok || p[field] == nil {
					continue
				}

				delete(p, field)
				testenv.Must(t, unstructured.SetNestedMap(v, p, props...))

				removed++
			}

			testenv.Must(t, unstructured.SetNestedSlice(u.Object, versions, "spec", "versions"))

			out, err := yaml.Marshal(u.Object)
			testenv.Must(t, err)

			docs[i] = string(out)
		}

		if removed == 0 {
			t.Fatalf("the manifest's %s has no spec.settings.%s to remove", ichorCRD, field)
		}

		return []byte(strings.Join(docs, "\n---\n"))
	}
}

// installedAt starts a world of one machine on subnet, whose pods run from
// the tree's build or by digest from b's releases, and installs rel there
// with its own ichor CLI (`ichor init --install=manifest
// --installer-image` rel's installer by digest); upgrades come from b's
// registry, which the IchorInstallation names (spec.version.installerRepository).
func installedAt(t *testing.T, subnet, pods string, build func(b *releaseBuilder) ichorRelease) (*world, *releaseBuilder, ichorRelease) {
	t.Helper()

	ctx := t.Context()

	w, err := startWorldIn(subnet, 1, 1, pods)
	testenv.Must(t, err)
	t.Cleanup(w.stop)

	b := newReleaseBuilder(t, w.bin)
	rel := build(b)
	w.cli = filepath.Join(rel.bin, "ichor")

	out, err := w.ichor(ctx, "init", "--cluster", upgradeCluster, "--preset", "standard", "--node", w.machines[0].ip(),
		"--install", "manifest", "--installer-image", rel.installer.String(), "--write-kubeconfig", w.kubeconfig, "--timeout", "8m")
	if err != nil {
		t.Fatalf("%v\nthe installer Job's log: %s", err, w.jobLog(ctx, install.JobName(rel.version)))
	}

	t.Logf("init:\n%s", out)
	w.waitInstalled(t, ctx, rel)

	w.kubectlOK(t, ctx, "patch", "ichorinstallation", "ichor", "--type", "merge",
		"-p", fmt.Sprintf(`{"spec":{"version":{"installerRepository":%q}}}`, b.repository("ichor-installer").Name()))

	return w, b, rel
}

// upgradeIchor runs `ichor upgrade ichor VERSION` and returns the operation's name.
func (w *world) upgradeIchor(t *testing.T, ctx context.Context, version string) string {
	t.Helper()

	out := w.mustIchor(t, ctx, "upgrade", "ichor", version, "--cluster", upgradeCluster, "--yes")

	m := regexp.MustCompile(`Started operation (\S+)\.`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no operation named in:\n%s", out)
	}

	return m[1]
}

// TestIchorSelfUpgrade: Ichor v0.8.0, installed by `ichor init
// --install=manifest` from its signed installer image, is upgraded to
// v0.9.0 with `ichor upgrade ichor v0.9.0`: the controller resolves the tag
// to a digest, verifies the signature and runs the installer Job by digest;
// the controller's and ichor-ui's pods are replaced by pods of v0.9.0's
// images (and run v0.9.0's binaries), the CRDs gain v0.9.0's field and lose
// nothing, the IchorInstallation records v0.9.0, and a config operation
// waiting for the cluster lock the upgrade holds is carried out by the new
// controller.
func TestIchorSelfUpgrade(t *testing.T) {
	ctx := t.Context()

	var to ichorRelease

	w, b, _ := installedAt(t, upgradeSubnet, upgradePodSubnet, func(b *releaseBuilder) ichorRelease {
		from := b.build(fromVersion, withoutField(addedField))
		to = b.build(toVersion, nil)

		return from
	})

	if w.crdHasField(t, ctx, addedField) {
		t.Fatalf("%s's CRD already has spec.settings.%s: the upgrade would add nothing", fromVersion, addedField)
	}

	before := w.crd(t, ctx)
	op := w.upgradeIchor(t, ctx, toVersion)

	// While the installer runs the upgrade holds the cluster lock: a config
	// operation created now waits for it, across the controllers' hand-over.
	testenv.EventuallyEvery(t, 5*time.Minute, time.Second, "the upgrade running its installer Job", func() (bool, string) {
		st := w.operation(ctx, op)

		return st.Status.Ichor.Job != "", fmt.Sprintf("%+v", st.Status)
	})

	w.kubectlCreate(t, ctx, fmt.Sprintf(`apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosOperation
metadata: {name: config-during-upgrade, namespace: %s}
spec: {clusterName: %s, type: config}
`, w.clusterNamespace(t, ctx), upgradeCluster))

	var st opState

	testenv.EventuallyEvery(t, 12*time.Minute, 2*time.Second, "the upgrade to succeed", func() (bool, string) {
		st = w.operation(ctx, op)
		if st.Status.Phase == ichorv1alpha1.OperationPaused || st.Status.Phase == ichorv1alpha1.OperationFailed {
			t.Fatalf("the upgrade stopped: %+v\nthe installer Job's log: %s", st.Status, w.jobLog(ctx, st.Status.Ichor.Job))
		}

		return st.Status.Phase == ichorv1alpha1.OperationSucceeded, fmt.Sprintf("%+v", st.Status)
	})

	if want := b.repository("ichor-installer").Digest(to.installer.DigestStr()).String(); st.Status.Ichor.Image != want {
		t.Errorf("the operation ran installer %q, want %s (%s's, by digest)", st.Status.Ichor.Image, want, toVersion)
	}

	if st.Status.Ichor.Signature != ichorv1alpha1.SignatureVerified || !strings.Contains(st.Status.Ichor.Signer, "release.yml@refs/tags/"+toVersion) {
		t.Errorf("the operation's signature record: %q by %q, want %s by the release workflow at %s", st.Status.Ichor.Signature, st.Status.Ichor.Signer,
			ichorv1alpha1.SignatureVerified, toVersion)
	}

	if img := w.jsonpath(t, ctx, "job", st.Status.Ichor.Job, "{.spec.template.spec.containers[0].image}"); img != st.Status.Ichor.Image {
		t.Errorf("the installer Job runs %q, want %s", img, st.Status.Ichor.Image)
	}

	w.waitInstalled(t, ctx, to)

	if !w.crdHasField(t, ctx, addedField) {
		t.Errorf("after the upgrade the CRD %s has no spec.settings.%s", ichorCRD, addedField)
	}

	changes, err := crdcheck.Check(before, w.crd(t, ctx), nil)
	testenv.Must(t, err)

	if refused := crdcheck.Refused(changes); len(refused) > 0 {
		t.Errorf("the upgrade changed the CRD in a way that is not additive: %v", refused)
	}

	testenv.EventuallyEvery(t, 5*time.Minute, 2*time.Second, "the config operation, after the upgrade", func() (bool, string) {
		cfg := w.operation(ctx, "config-during-upgrade")

		return cfg.Status.Phase == ichorv1alpha1.OperationSucceeded, fmt.Sprintf("%+v", cfg.Status)
	})
}

// badFlag is the flag the broken release passes its controller: the
// controller exits at start (flag: provided but not defined).
const badFlag = "--flag-no-release-defines"

// withControllerArg adds arg to the controller container's args.
func withControllerArg(arg string) func(*testing.T, []byte) []byte {
	return func(t *testing.T, manifest []byte) []byte {
		t.Helper()

		docs := strings.Split(string(manifest), "\n---\n")

		for i, doc := range docs {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil || u.GetKind() != "Deployment" || u.GetName() != install.ControllerName {
				continue
			}

			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			c, _ := containers[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			testenv.Must(t, unstructured.SetNestedStringSlice(c, append(args, arg), "args"))
			testenv.Must(t, unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"))

			out, err := yaml.Marshal(u.Object)
			testenv.Must(t, err)

			docs[i] = string(out)

			return []byte(strings.Join(docs, "\n---\n"))
		}

		t.Fatal("the manifest has no controller Deployment")

		return nil
	}
}

// TestSelfUpgradeRollback: the installer of a signed v0.9.0 whose
// controller cannot start (its manifest passes a flag the controller does
// not define) is run by `ichor upgrade ichor v0.9.0`; the new controller
// pod crash-loops, the installer gives up on it (without waiting for its
// timeout), restores its snapshot and waits for v0.8.0 to run again; the
// Job fails, the operation pauses naming the crash loop and the rollback,
// the IchorInstallation says RolledBack and still records v0.8.0, and
// v0.8.0's controller and ichor-ui run, Ready, from v0.8.0's template.
// Then, with the controller scaled to zero, `ichor upgrade ichor v0.9.0
// --local --installer-digest` of a good v0.9.0 installs it from the CLI.
func TestSelfUpgradeRollback(t *testing.T) {
	ctx := t.Context()

	var to ichorRelease

	w, _, from := installedAt(t, rollbackSubnet, rollbackPodSubnet, func(b *releaseBuilder) ichorRelease {
		from := b.build(fromVersion, nil)
		// A good v0.9.0 for the way out below, then the broken one, pushed
		// last: the tag v0.9.0 names it.
		to = b.build(toVersion, nil)
		b.rebuild(toVersion, from, withControllerArg(badFlag))

		return from
	})

	op := w.upgradeIchor(t, ctx, toVersion)

	var st opState

	testenv.EventuallyEvery(t, 10*time.Minute, 2*time.Second, "the upgrade to pause", func() (bool, string) {
		st = w.operation(ctx, op)
		if st.Status.Phase == ichorv1alpha1.OperationSucceeded {
			t.Fatalf("a release whose controller cannot start was installed: %+v", st.Status)
		}

		return st.Status.Phase == ichorv1alpha1.OperationPaused, fmt.Sprintf("%+v", st.Status)
	})

	log := w.jobLog(ctx, st.Status.Ichor.Job)
	for _, want := range []string{"FAILED at controller", "crash-loops", "rolled back: " + fromVersion + " runs again"} {
		if !strings.Contains(log, want) {
			t.Errorf("the installer's log does not say %q:\n%s", want, log)
		}
	}

	for _, want := range []string{"crash-loops", "rolled back"} {
		if !strings.Contains(st.Status.FailureReason, want) {
			t.Errorf("the paused operation's reason does not say %q: %s", want, st.Status.FailureReason)
		}
	}

	w.waitInstalled(t, ctx, from)

	if args := w.jsonpath(t, ctx, "deployment", install.ControllerName, "{.spec.template.spec.containers[0].args}"); strings.Contains(args, badFlag) {
		t.Errorf("after the rollback the controller's Deployment still passes %s: %s", badFlag, args)
	}

	cond := w.kubectlOK(t, ctx, "get", "ichorinstallation", "ichor", "-o",
		`jsonpath={.status.conditions[?(@.type=="Installed")].status} {.status.conditions[?(@.type=="Installed")].reason}`)
	if strings.TrimSpace(cond) != "False "+ichorv1alpha1.RolledBackReason {
		t.Errorf("the IchorInstallation's Installed condition after the rollback: %q, want False %s", cond, ichorv1alpha1.RolledBackReason)
	}

	// The way out when no controller runs to start an installer Job:
	// `ichor upgrade ichor --local` runs the installer of the good v0.9.0
	// (pinned by digest) from the CLI, with its checks.
	w.kubectlOK(t, ctx, "scale", "-n", icNamespace, "deployment", install.ControllerName, "--replicas=0")
	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "no controller pod", func() (bool, string) {
		pods, err := w.kubectl(ctx, "get", "pods", "-n", icNamespace, "-l", "app.kubernetes.io/name="+install.ControllerName, "-o", "name")

		return err == nil && strings.TrimSpace(pods) == "", pods
	})

	out := w.mustIchor(t, ctx, "upgrade", "ichor", toVersion, "--local", "--installer-digest", to.installer.DigestStr(), "--cluster", upgradeCluster, "--yes")
	for _, want := range []string{"Signature: verified, signed by https://github.com/maeshinshin/ichor/.github/workflows/release.yml@refs/tags/" + toVersion,
		"[9/9]", "Ichor " + toVersion + " is installed."} {
		if !strings.Contains(out, want) {
			t.Errorf("`ichor upgrade ichor --local` did not print %q:\n%s", want, out)
		}
	}

	w.waitInstalled(t, ctx, to)
}

// opState is what the test reads of a TalosOperation.
type opState struct {
	Status struct {
		Phase         string `json:"phase"`
		FailureReason string `json:"failureReason"`
		Ichor         struct {
			Image     string `json:"image"`
			Job       string `json:"job"`
			Signature string `json:"signature"`
			Signer    string `json:"signer"`
		} `json:"ichor"`
	} `json:"status"`
}

func (w *world) operation(ctx context.Context, name string) opState {
	var st opState

	out, err := w.kubectl(ctx, "get", "talosoperation", "-A", "--field-selector", "metadata.name="+name, "-o", "jsonpath={.items[0]}")
	if err == nil {
		_ = json.Unmarshal([]byte(out), &st)
	}

	return st
}

func (w *world) kubectlOK(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()

	out, err := w.kubectl(ctx, args...)
	testenv.Must(t, err)

	return out
}

func (w *world) kubectlCreate(t *testing.T, ctx context.Context, doc string) {
	t.Helper()

	file := filepath.Join(w.dir, fmt.Sprintf("create-%d.yaml", time.Now().UnixNano()))
	testenv.Must(t, os.WriteFile(file, []byte(doc), 0o600))
	w.kubectlOK(t, ctx, "create", "-f", file)
}

func (w *world) jsonpath(t *testing.T, ctx context.Context, kind, name, path string) string {
	t.Helper()

	return strings.TrimSpace(w.kubectlOK(t, ctx, "get", "-n", icNamespace, kind, name, "-o", "jsonpath="+path))
}

// clusterNamespace is the namespace of the world's one TalosCluster.
func (w *world) clusterNamespace(t *testing.T, ctx context.Context) string {
	t.Helper()

	return strings.TrimSpace(w.kubectlOK(t, ctx, "get", "taloscluster", "-A", "-o", "jsonpath={.items[0].metadata.namespace}"))
}

// jobLog is the log of a Job in Ichor's namespace, for a failure's message.
func (w *world) jobLog(ctx context.Context, job string) string {
	if job == "" {
		return "(no Job)"
	}

	out, err := w.kubectl(ctx, "logs", "-n", icNamespace, "job/"+job)
	if err != nil {
		return err.Error()
	}

	return out
}

// waitInstalled waits until the IchorInstallation records version and the
// controller's and ichor-ui's Deployments name rel's images, with every pod
// of theirs running those images (no pod of another image left) and the
// controller's log saying it is that version.
func (w *world) waitInstalled(t *testing.T, ctx context.Context, rel ichorRelease) {
	t.Helper()

	version := rel.version

	testenv.EventuallyEvery(t, 5*time.Minute, 2*time.Second, "Ichor "+version+" installed and running", func() (bool, string) {
		installed, err := w.kubectl(ctx, "get", "ichorinstallation", "ichor", "-o", "jsonpath={.status.installedVersion}")
		if err != nil || installed != version {
			return false, fmt.Sprintf("installedVersion %q (%v)", installed, err)
		}

		for dep, want := range map[string]name.Digest{install.ControllerName: rel.controller, install.UIName: rel.ui} {
			img, err := w.kubectl(ctx, "get", "-n", icNamespace, "deployment", dep, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
			if err != nil || img != want.String() {
				return false, fmt.Sprintf("Deployment %s runs %q (%v), want %s", dep, img, err, want)
			}

			pods, err := w.kubectl(ctx, "get", "-n", icNamespace, "pods", "-l", "app.kubernetes.io/name="+dep,
				"-o", `jsonpath={range .items[*]}{.spec.containers[0].image} {.status.containerStatuses[0].ready}{"\n"}{end}`)
			if err != nil {
				return false, err.Error()
			}

			lines := strings.Fields(strings.TrimSpace(pods))
			if len(lines) == 0 || len(lines)%2 != 0 {
				return false, fmt.Sprintf("pods of %s: %q", dep, pods)
			}

			for i := 0; i < len(lines); i += 2 {
				if lines[i] != want.String() || lines[i+1] != "true" {
					return false, fmt.Sprintf("pods of %s: %q", dep, pods)
				}
			}
		}

		logs, err := w.kubectl(ctx, "logs", "-n", icNamespace, "deployment/"+install.ControllerName)
		if err != nil {
			return false, err.Error()
		}

		if !regexp.MustCompile(`starting ichor-controller.*"version":"` + regexp.QuoteMeta(version) + `"`).MatchString(logs) {
			return false, "the controller's log does not say it is " + version
		}

		return true, ""
	})
}

func (w *world) crd(t *testing.T, ctx context.Context) *unstructured.Unstructured {
	t.Helper()

	u := &unstructured.Unstructured{}
	testenv.Must(t, json.Unmarshal([]byte(w.kubectlOK(t, ctx, "get", "crd", ichorCRD, "-o", "json")), &u.Object))

	return u
}

func (w *world) crdHasField(t *testing.T, ctx context.Context, field string) bool {
	t.Helper()

	versions, _, _ := unstructured.NestedSlice(w.crd(t, ctx).Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if _, ok, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema", "properties", "spec", "properties", "settings", "properties", field); ok {
			return true
		}
	}

	return false
}
