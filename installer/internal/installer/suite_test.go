package installer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installer"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one emulated world: a control plane (cp-1,
// tainted control-plane:NoSchedule, which Ichor's pods tolerate) and a worker
// (w-1), with the real Kubernetes control plane on cp-1 (kube-apiserver,
// kube-controller-manager, kube-scheduler) and kwok playing the kubelets, so
// Deployments become available as they would. Ichor's pods are simulated:
// the controller does not really run, so the admission webhooks do not
// answer and the post-check's refusal is left out (SkipWebhookRefusal); the
// e2e TestInClusterInstall runs the real pods.
//
// The installer runs in-process as a library, authenticated as its own
// ServiceAccount (a token from the TokenRequest API), so its RBAC is what
// the manifest grants it; only the bootstrap of that RBAC is done as the
// cluster admin, as `ichor init` does before it starts the Job.
var (
	world *talosemu.World
	// admin is the cluster admin's configuration and client.
	admin     *rest.Config
	k8s       client.Client
	clientset *kubernetes.Clientset
	// installerConfig authenticates as system:serviceaccount:ichor-system:ichor-installer.
	installerConfig *rest.Config
	// worker is w-1's Node name.
	worker string
)

const (
	ns          = install.Namespace
	waitTimeout = 3 * time.Minute
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The installer's log is its own lines; controller-runtime's logger stays quiet.
	ctrllog.SetLogger(logr.Discard())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir, err := os.MkdirTemp("", "ichor-installer-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)

		return 1
	}

	defer func() { _ = os.RemoveAll(dir) }()

	if err := setup(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: setting up the emulated world:", err)

		if world != nil {
			world.Close()
		}

		return 1
	}

	defer world.Close()

	return m.Run()
}

func setup(ctx context.Context, dir string) error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{
		Subnet: "127.0.140.0/24",
		Machines: []talosemu.MachineSpec{
			{Name: "cp-1", Role: talosemu.RoleHintControlPlane},
			{Name: "w-1", Role: talosemu.RoleHintWorker},
		},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(200 * time.Millisecond), Reboot: talosemu.Duration(200 * time.Millisecond), Boot: talosemu.Duration(100 * time.Millisecond),
		},
	}

	world, err = talosemu.Start(ctx, spec, dir, talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true})
	if err != nil {
		return err
	}

	cp, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	w1, err := world.Machine("w-1")
	if err != nil {
		return err
	}

	// A cluster made with machinery's generate, as talosctl gen config does.
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		return err
	}

	in, err := generate.NewInput("installer", "https://"+cp.IP()+":6443", "1.37.2",
		generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/nvme0n1"))
	if err != nil {
		return err
	}

	for _, x := range []struct {
		m   *talosemu.Machine
		typ machine.Type
	}{{cp, machine.TypeControlPlane}, {w1, machine.TypeWorker}} {
		cfg, err := in.Config(x.typ)
		if err != nil {
			return err
		}

		data, err := cfg.EncodeBytes()
		if err != nil {
			return err
		}

		if err := x.m.ApplyInMaintenance(ctx, data, 2*time.Minute); err != nil {
			return err
		}
	}

	talosconfig, err := in.Talosconfig()
	if err != nil {
		return err
	}

	tc, err := talosclient.New(ctx, talosclient.WithConfig(talosconfig), talosclient.WithEndpoints(cp.IP()))
	if err != nil {
		return err
	}

	defer func() { _ = tc.Close() }()

	if _, err := tc.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}

	kubeconfig, err := tc.Kubeconfig(ctx)
	if err != nil {
		return err
	}

	if admin, err = clientcmd.RESTConfigFromKubeConfig(kubeconfig); err != nil {
		return err
	}

	admin.Timeout = 30 * time.Second

	if k8s, err = client.New(admin, client.Options{Scheme: installer.Scheme()}); err != nil {
		return err
	}

	if clientset, err = kubernetes.NewForConfig(admin); err != nil {
		return err
	}

	if err := waitNodes(ctx); err != nil {
		return err
	}

	return bootstrapInstallerRBAC(ctx)
}

// waitNodes waits until both Nodes are Ready and kwok runs their pods.
func waitNodes(ctx context.Context) error {
	deadline := time.Now().Add(4 * time.Minute)

	for {
		nodes := &corev1.NodeList{}

		err := k8s.List(ctx, nodes)
		if err == nil {
			ready := 0

			for _, n := range nodes.Items {
				if nodeReady(&n) && n.Labels["talosemu.ichor.dev/kwok-managed"] == "true" {
					ready++

					if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; !cp {
						worker = n.Name
					}
				}
			}

			if ready == 2 && worker != "" {
				return nil
			}

			err = fmt.Errorf("%d of 2 nodes Ready", ready)
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("the nodes: %w", err)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// bootstrapInstallerRBAC applies the Namespace and the installer's RBAC as
// the cluster admin (what `ichor init` does before it creates the Job) and
// gets a token of the installer's ServiceAccount.
func bootstrapInstallerRBAC(ctx context.Context) error {
	objs, err := install.Objects()
	if err != nil {
		return err
	}

	for _, o := range install.ByStep(objs, install.StepInstallerRBAC) {
		if err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("test-bootstrap"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}

	exp := int64(2 * 3600)

	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, install.InstallerName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token of ServiceAccount %s: %w", install.InstallerName, err)
	}

	installerConfig = &rest.Config{
		Host:            admin.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		Timeout:         30 * time.Second,
	}

	return nil
}

// installerKubeconfig writes a kubeconfig of the installer's ServiceAccount.
func installerKubeconfig(t *testing.T) string {
	t.Helper()

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: installerConfig.Host, CertificateAuthorityData: installerConfig.CAData}
	cfg.AuthInfos["installer"] = &clientcmdapi.AuthInfo{Token: installerConfig.BearerToken}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "installer"}
	cfg.CurrentContext = "c"

	path := t.TempDir() + "/kubeconfig"
	testenv.Must(t, clientcmd.WriteToFile(*cfg, path))

	return path
}

// runInstaller runs the installer in-process as its ServiceAccount and
// returns its log.
func runInstaller(t *testing.T, o installer.Options) (string, error) {
	t.Helper()

	var log bytes.Buffer

	o.Config, o.Log, o.SkipWebhookRefusal = installerConfig, &log, true
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 2 * time.Minute
	}

	err := installer.Run(t.Context(), o)
	t.Logf("installer %s log:\n%s", o.Version, log.String())

	return log.String(), err
}

// reset removes everything of Ichor the manifest installs except the
// Namespace and the installer's RBAC, the CRDs included, so a test starts
// from a cluster Ichor was never installed in.
func reset(t *testing.T) {
	t.Helper()

	ctx := t.Context()

	objs, err := install.Objects()
	testenv.Must(t, err)

	ii := &ichorv1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName}}
	if err := k8s.Delete(ctx, ii); err != nil && !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err) {
		t.Fatal(err)
	}

	var gone []*unstructured.Unstructured

	// The admission configuration first: nothing serves the webhooks.
	for _, step := range []install.Step{install.StepController, install.StepUI, install.StepCRDs} {
		for _, o := range install.ByStep(objs, step) {
			if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
				del(t, o)
			}
		}
	}

	for _, step := range []install.Step{install.StepController, install.StepUI, install.StepCRDs} {
		for _, o := range install.ByStep(objs, step) {
			del(t, o)
			gone = append(gone, o)
		}
	}

	del(t, snapshotObject())

	var nudged time.Time

	testenv.Eventually(t, waitTimeout, "Ichor's objects gone", func() error {
		for _, o := range gone {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())

			err := k8s.Get(ctx, client.ObjectKeyFromObject(o), cur)
			if err == nil {
				return stillThere(t, cur, &nudged)
			}

			if !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err) {
				return err
			}
		}

		return nil
	})
}

// stillThere says why an object reset deleted is still there. A
// CustomResourceDefinition waits for the API server's finalizer
// (customresourcecleanup) to delete its instances; its Terminating condition
// says how far it got. Once one has been terminating for 30 s, an annotation
// is written to it: the finalizer's queue takes every update of a terminating
// CustomResourceDefinition at once, while a key that failed before waits out
// its exponential back-off (apiextensions-apiserver
// pkg/controller/finalizer/crd_finalizer.go, updateCustomResourceDefinition).
// nudged is when that was last done; it is done every 15 s at most.
func stillThere(t *testing.T, cur *unstructured.Unstructured, nudged *time.Time) error {
	t.Helper()

	err := fmt.Errorf("%s %s is still there (finalizers %v)", cur.GetKind(), cur.GetName(), cur.GetFinalizers())

	if cur.GetKind() != "CustomResourceDefinition" || cur.GetDeletionTimestamp() == nil {
		return err
	}

	conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Terminating" {
			err = fmt.Errorf("%w: Terminating %v %v: %v", err, m["status"], m["reason"], m["message"])
		}
	}

	if time.Since(cur.GetDeletionTimestamp().Time) > 30*time.Second && time.Since(*nudged) > 15*time.Second {
		*nudged = time.Now()
		t.Logf("nudging the API server's finalizer of %s: %v", cur.GetName(), err)

		patch := fmt.Sprintf(`{"metadata":{"annotations":{"ichor.test/reset":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if perr := k8s.Patch(t.Context(), cur, client.RawPatch(types.MergePatchType, []byte(patch))); perr != nil && !apierrors.IsNotFound(perr) {
			t.Logf("nudging %s: %v", cur.GetName(), perr)
		}
	}

	return err
}

func snapshotObject() *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	o.SetKind("ConfigMap")
	o.SetNamespace(ns)
	o.SetName(installer.SnapshotName)

	return o
}

func del(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()

	err := k8s.Delete(t.Context(), o.DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err) {
		t.Fatalf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// installed makes sure version runs, installed from the embedded manifest
// on a cluster reset first.
func installed(t *testing.T, version string) {
	t.Helper()

	reset(t)

	if _, err := runInstaller(t, installer.Options{Version: version}); err != nil {
		t.Fatalf("installing %s: %v", version, err)
	}
}

func installation(t *testing.T) *ichorv1alpha1.IchorInstallation {
	t.Helper()

	ii := &ichorv1alpha1.IchorInstallation{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii))

	return ii
}

// mustContain fails unless text holds every want, in order.
func mustContain(t *testing.T, what, text string, want ...string) {
	t.Helper()

	rest := text
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("%s has no %q (in order) in:\n%s", what, w, text)
		}

		rest = rest[i+len(w):]
	}
}
