// Package testenv starts a real Kubernetes API server (kube-apiserver and etcd,
// built from source by `go tool task assets`) for integration tests and the
// demo, with Ichor's CRDs from kustomize/ installed.
//
// The binaries are found through KUBEBUILDER_ASSETS, which the Taskfile sets.
// When they are missing, every entry point fails with a message that names the
// task to run; nothing is downloaded.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv is the environment variable that points at the directory of test binaries.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// RequiredAssets are the binaries an API server for tests needs.
var RequiredAssets = []string{"kube-apiserver", "etcd", "kubectl"}

// ErrAssetsMissing is returned (wrapped) when the test binaries cannot be found.
var ErrAssetsMissing = errors.New("control-plane test binaries are missing")

// AssetsDir returns the directory named by KUBEBUILDER_ASSETS after checking
// that it holds every required binary. The error tells a person what to do.
func AssetsDir() (string, error) {
	dir := os.Getenv(AssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%w: %s is not set; run the tests through `go tool task test`, "+
			"or build the binaries with `go tool task assets` and export %s=$(go tool task assets:dir)",
			ErrAssetsMissing, AssetsEnv, AssetsEnv)
	}
	for _, name := range RequiredAssets {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: %s=%s has no executable %q; build it with `go tool task assets`",
				ErrAssetsMissing, AssetsEnv, dir, name)
		}
	}
	return dir, nil
}

// RepoRoot returns the repository root: the nearest directory above the
// working directory that holds go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (no go.work above the working directory)")
		}
		dir = parent
	}
}

// DefaultCRDDir is where the CRDs live, relative to the repository root.
const DefaultCRDDir = "kustomize/base/crd"

// Options configure Start.
type Options struct {
	// CRDDirs are directories of CRD manifests, relative to the repository root.
	// Empty means DefaultCRDDir.
	CRDDirs []string
	// Scheme for the returned client. Empty means client-go's scheme plus apiextensions.
	Scheme *runtime.Scheme
	// KubeAPIServerFlags are extra flags for kube-apiserver (name -> value).
	KubeAPIServerFlags map[string]string
	// WebhookDirs are directories of ValidatingWebhookConfiguration and
	// MutatingWebhookConfiguration manifests, relative to the repository root.
	// envtest rewrites them to call a local webhook server (see Env.Webhook) with
	// a serving certificate it generates. Empty means no webhooks.
	WebhookDirs []string
}

// Env is a running API server.
type Env struct {
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// Client is a controller-runtime client built from Config.
	Client client.Client
	// CRDs are the CRDs that were installed.
	CRDs []*apiextensionsv1.CustomResourceDefinition

	env *envtest.Environment
}

// Start starts etcd and kube-apiserver from KUBEBUILDER_ASSETS and installs the CRDs.
// Call Stop when done.
func Start(opts Options) (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dirs := opts.CRDDirs
	if len(dirs) == 0 {
		dirs = []string{DefaultCRDDir}
	}
	paths := make([]string, 0, len(dirs))
	for _, d := range dirs {
		paths = append(paths, filepath.Join(root, d))
	}
	scheme := opts.Scheme
	if scheme == nil {
		scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return nil, err
		}
		if err := apiextensionsv1.AddToScheme(scheme); err != nil {
			return nil, err
		}
	}

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	for _, d := range opts.WebhookDirs {
		env.WebhookInstallOptions.Paths = append(env.WebhookInstallOptions.Paths, filepath.Join(root, d))
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for k, v := range opts.KubeAPIServerFlags {
		args.Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, CRDs: env.CRDs, env: env}, nil
}

// EtcdEndpoint is the address of the API server's etcd, for a test that
// stores an object as an older release could have left it (past today's
// schema and admission), under the API server's /registry prefix.
func (e *Env) EtcdEndpoint() string {
	return e.env.ControlPlane.Etcd.URL.String()
}

// Stop stops kube-apiserver and etcd and removes their data.
func (e *Env) Stop() error {
	return e.env.Stop()
}

// WebhookServer describes where the installed webhook configurations send
// their requests: a webhook server in the test process must listen there.
type WebhookServer struct {
	// Host and Port are the address to listen on.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key, signed by the CA the configurations trust.
	CertDir string
}

// Webhook returns where the installed webhooks call; it is empty when
// Options.WebhookDirs was empty.
func (e *Env) Webhook() WebhookServer {
	o := e.env.WebhookInstallOptions
	return WebhookServer{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir}
}

// UserConfig returns a rest.Config that authenticates as user name in groups
// (with a client certificate), so RBAC and admission see that user.
func (e *Env) UserConfig(name string, groups ...string) (*rest.Config, error) {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// UserKubeconfig returns a kubeconfig file's contents that authenticate as
// user name in groups (a client certificate), for a process the test starts:
// the API server's audit log names that user.
func (e *Env) UserKubeconfig(name string, groups ...string) ([]byte, error) {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return user.KubeConfig()
}

// ApplyDir creates every object of the YAML manifests (*.yaml, *.yml) in dir,
// relative to the repository root, as the cluster administrator. A
// kustomization.yaml is skipped: the directory is read as plain manifests.
func (e *Env) ApplyDir(ctx context.Context, dir string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(root, dir, "*.y*ml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no manifests in %s", dir)
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if err := e.Client.Create(ctx, obj); err != nil {
				return fmt.Errorf("%s: creating %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

// KubeconfigYAML returns an admin kubeconfig for the API server.
func (e *Env) KubeconfigYAML() ([]byte, error) {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	return user.KubeConfig()
}
