package talosemu

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Kubernetes at more than one version (issue 22). On Talos each control-plane component is a
// static pod running the image its machine config names (KubeAPIServerConfig.image, …;
// t:internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go) and the kubelet runs
// the image of KubeletConfig (t:internal/app/machined/pkg/controllers/k8s/kubelet_spec.go). The
// emulator runs, for each component, the binary built for the version in its image's tag: the
// directory of Options.KubeAssets when its kube-apiserver reports that version, else
// Options.KubeAssetsByVersion[version], else the sibling directory named after the version
// (`go tool task assets` builds v1.37.2 into …/assets/v1.37.2 and the previous minor, v1.36.3,
// into …/assets/v1.36.3). A version without binaries does not start (the static pod's image
// cannot run), and its control plane is reported down, as a missing image would leave it.
//
// The previous minor's binaries are v1.37.2's source linked with v1.36.3 stamped as its version
// (tools/assets/build.sh): /version, the Node's kubeletVersion and the apiserver's version-
// dependent behaviour say v1.36.3, but the API surface is v1.37's.
//
// The emulated registry: an image of a Kubernetes component (kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy, kubelet) exists only for the versions of
// the world's Kubernetes release list (KubernetesReleases, served as the OCI tag list of
// ghcr.io/siderolabs/kubelet at GET /v2/siderolabs/kubelet/tags/list on the control API); any
// other image exists. ImageService.Pull of a missing image fails NotFound, as Talos's does
// (t:internal/app/images/images.go Pull), and every pull is recorded (PulledImages, GET
// /machines/{name}/images).

// DefaultKubernetesReleases are the Kubernetes versions the world's registry has images of until
// SetKubernetesReleases changes them: the version `go tool task assets` builds and the previous
// minor it stamps.
var DefaultKubernetesReleases = []string{"v1.36.3", "v1.37.2"}

// kubeComponentImages are the repositories' last path elements of Kubernetes component images.
var kubeComponentImages = append(slices.Clone(kubeBinaries), "kube-proxy", "kubelet")

// kubeVersionState is the world's Kubernetes release list and the versions of its binaries.
type kubeVersionState struct {
	kvMu         sync.Mutex
	kubeReleases []string
	binVersions  map[string]string // binary path → version it reports
	byVersion    map[string]string // Options.KubeAssetsByVersion
}

// KubernetesReleases are the Kubernetes versions the world's registry has images of.
func (w *World) KubernetesReleases() []string {
	w.kvMu.Lock()
	defer w.kvMu.Unlock()

	if w.kubeReleases == nil {
		return slices.Clone(DefaultKubernetesReleases)
	}

	return slices.Clone(w.kubeReleases)
}

// SetKubernetesReleases changes the Kubernetes versions the world's registry has images of.
func (w *World) SetKubernetesReleases(vs []string) {
	w.kvMu.Lock()
	w.kubeReleases = slices.Clone(vs)
	w.kvMu.Unlock()
}

// KubernetesReleaseSource is the base URL of the world's emulated registry (the control API):
// GET KubernetesReleaseSource()+"/v2/siderolabs/kubelet/tags/list" answers the OCI tag list.
func (w *World) KubernetesReleaseSource() string { return w.ControlURL() }

// imageTag is the tag of an image reference ("" without one; a digest is dropped).
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")

	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[colon+1:]
	}

	return ""
}

// imageRepository is an image reference without its tag and digest.
func imageRepository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")

	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon]
	}

	return ref
}

// kubeImageVersion is the Kubernetes version an image's tag names ("v1.37.2" of
// "registry.k8s.io/kube-apiserver:v1.37.2", also without the "v"; kubelet flavours such as
// "-fat" dropped), or "".
func kubeImageVersion(ref string) string {
	tag := imageTag(ref)
	if tag == "" {
		return ""
	}

	tag, _, _ = strings.Cut(tag, "-")
	if !strings.HasPrefix(tag, "v") {
		tag = "v" + tag
	}

	if strings.Count(tag, ".") != 2 {
		return ""
	}

	return tag
}

// isKubeComponentImage reports whether ref is an image of a Kubernetes component.
func isKubeComponentImage(ref string) bool {
	repo := imageRepository(ref)

	return slices.Contains(kubeComponentImages, repo[strings.LastIndex(repo, "/")+1:])
}

// binaryVersion is the version a Kubernetes binary reports (`--version` prints "Kubernetes
// v1.37.2"), cached per path; "" when it does not run.
func (w *World) binaryVersion(path string) string {
	w.kvMu.Lock()
	v, ok := w.binVersions[path]
	w.kvMu.Unlock()

	if ok {
		return v
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}

	v = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes"))

	w.kvMu.Lock()
	if w.binVersions == nil {
		w.binVersions = map[string]string{}
	}

	w.binVersions[path] = v
	w.kvMu.Unlock()

	return v
}

// kubeBinary is the binary of component for the version of image: the first of
// Options.KubeAssets, Options.KubeAssetsByVersion[version] and the sibling directory named after
// the version whose binary reports that version. An image without a version tag runs
// Options.KubeAssets' binary.
func (w *World) kubeBinary(component, image string) (string, error) {
	def := filepath.Join(w.kubeAssets, component)

	version := kubeImageVersion(image)
	if version == "" {
		return def, nil
	}

	w.kvMu.Lock()
	extra := w.byVersion[version]
	w.kvMu.Unlock()

	dirs := []string{w.kubeAssets}
	if extra != "" {
		dirs = append(dirs, extra)
	}

	if w.kubeAssets != "" {
		dirs = append(dirs, filepath.Join(filepath.Dir(w.kubeAssets), version))
	}

	var seen []string

	for _, d := range dirs {
		p := filepath.Join(d, component)
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}

		got := w.binaryVersion(p)
		if got == version {
			return p, nil
		}

		seen = append(seen, fmt.Sprintf("%s is %s", p, orNone(got)))
	}

	return "", fmt.Errorf("no %s binary of Kubernetes %s for the image %s (%s); build it with `go tool task assets`, which puts the previous minor into %s",
		component, version, image, strings.Join(append(seen, "no other candidate"), ", "), filepath.Join(filepath.Dir(w.kubeAssets), version))
}

func orNone(s string) string {
	if s == "" {
		return "not runnable"
	}

	return s
}

// kubeImageExists reports whether the emulated registry has image: an image of a Kubernetes
// component only at a version of KubernetesReleases, any other image always.
func (w *World) kubeImageExists(image string) bool {
	if !isKubeComponentImage(image) {
		return true
	}

	return slices.Contains(w.KubernetesReleases(), kubeImageVersion(image))
}

// PulledImage is one ImageService.Pull a machine served.
type PulledImage struct {
	// Namespace is the containerd namespace asked for: "cri" (Kubernetes' images) or "system".
	Namespace string `json:"namespace"`
	// Image is the reference asked for.
	Image string `json:"image"`
	// Pulled is false when the image does not exist (the pull failed NotFound).
	Pulled bool `json:"pulled"`
	// At is when the pull was served.
	At time.Time `json:"at"`
}

// pulls are the image pulls of a machine since the world started (not persisted: containerd's
// content store lives on EPHEMERAL, and the tests read pulls of one run).
type pulls struct {
	pullMu sync.Mutex
	pulled []PulledImage
}

// PulledImages are the image pulls the machine served, in order.
func (m *Machine) PulledImages() []PulledImage {
	m.pullMu.Lock()
	defer m.pullMu.Unlock()

	return slices.Clone(m.pulled)
}

func (m *Machine) recordPull(p PulledImage) {
	m.pullMu.Lock()
	m.pulled = append(m.pulled, p)
	m.pullMu.Unlock()
}

func containerdNamespace(c *common.ContainerdInstance) string {
	if c.GetNamespace() == common.ContainerdNamespace_NS_SYSTEM {
		return "system"
	}

	return "cri"
}

// Pull pulls an image into containerd, as Talos's image service does
// (t:internal/app/images/images.go Pull): a missing image fails NotFound ("error pulling image:
// …"); a pulled one answers its reference pinned to its digest.
func (s *imageServer) Pull(in *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	ref := in.GetImageRef()
	if ref == "" {
		return status.Error(codes.InvalidArgument, "image reference is required")
	}

	rec := PulledImage{Namespace: containerdNamespace(in.GetContainerd()), Image: ref, At: time.Now()}

	if !s.m.world.kubeImageExists(ref) {
		s.m.recordPull(rec)

		return status.Errorf(codes.NotFound, "error pulling image: failed to resolve reference %q: %s: not found", ref, ref)
	}

	rec.Pulled = true
	s.m.recordPull(rec)

	return srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_Name{
		Name: imageRepository(ref) + "@sha256:" + seed(ref, "image-digest"),
	}})
}

// List lists the images pulled into a containerd namespace (t:internal/app/images/images.go
// List). Images Talos itself brought (its installer, the pause image) are not listed.
func (s *imageServer) List(in *machine.ImageServiceListRequest, srv grpc.ServerStreamingServer[machine.ImageServiceListResponse]) error {
	ns := containerdNamespace(in.GetContainerd())
	seen := map[string]bool{}

	for _, p := range s.m.PulledImages() {
		if !p.Pulled || p.Namespace != ns || seen[p.Image] {
			continue
		}

		seen[p.Image] = true

		if err := srv.Send(&machine.ImageServiceListResponse{
			Name: p.Image, Digest: "sha256:" + seed(p.Image, "image-digest"), Size: 1 << 24, CreatedAt: timestamppb.New(p.At),
		}); err != nil {
			return err
		}
	}

	return nil
}

// kubeVersionRoutes serves the release list and the pulls on the control API.
func (w *World) kubeVersionRoutes(handle func(pattern string, fn func(r *http.Request) (any, error)), action func(pattern string, fn func(m *Machine, r *http.Request) (any, error))) {
	// The OCI distribution API's tag list (GET /v2/<name>/tags/list), as ghcr.io answers it for
	// the kubelet image Talos runs.
	handle("GET /v2/siderolabs/kubelet/tags/list", func(*http.Request) (any, error) {
		return map[string]any{"name": "siderolabs/kubelet", "tags": w.KubernetesReleases()}, nil
	})
	handle("PUT /kubernetes-versions", func(r *http.Request) (any, error) {
		var vs []string
		if err := decodeOptional(r, &vs); err != nil {
			return nil, err
		}

		if len(vs) == 0 {
			return nil, badRequest("a JSON list of Kubernetes versions is required")
		}

		w.SetKubernetesReleases(vs)

		return w.KubernetesReleases(), nil
	})
	handle("GET /kubernetes-versions", func(*http.Request) (any, error) { return w.KubernetesReleases(), nil })
	action("GET /machines/{name}/images", func(m *Machine, _ *http.Request) (any, error) { return m.PulledImages(), nil })
}

// kubeletVersion is the Kubernetes version of the running config's kubelet image ("" without
// one): what the kubelet reports as its Node's kubeletVersion.
func (m *Machine) kubeletVersion() string {
	cfg := m.activeConfig()
	if cfg == nil || cfg.K8sKubeletConfig() == nil {
		return ""
	}

	return kubeImageVersion(cfg.K8sKubeletConfig().Image())
}
