package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// Issue 27, item 3: Ichor installed with Helm. The chart (charts/ichor) is
// installed with the Helm SDK, as `helm install` does; its controller runs
// with --deployment-manager=helm and records the install in the
// IchorInstallation (spec.deployment.manager: helm), after which `ichor
// upgrade ichor` refuses and names `helm upgrade`. The chart's preflight.cni
// refuses a cluster whose nodes are NotReady for want of a pod network.

const (
	// helmSubnet and helmPodSubnet are the loopback ranges of this test's
	// own emulated machine and of its pods' processes.
	helmSubnet    = "127.0.201.0/24"
	helmPodSubnet = "127.201.0.0/24"
	helmCluster   = "helm"
)

// TestHelmManagedRefusesUpgrade: the chart's preflight.cni, and a
// Helm-managed Ichor refusing `ichor upgrade ichor`.
func TestHelmManagedRefusesUpgrade(t *testing.T) {
	t.Run("preflight.cni", helmPreflightCNI)
	t.Run("upgrade refused", helmManagedUpgradeRefused)
}

// helmPreflightCNI: on a real API server whose only Node is NotReady as a
// kubelet without a CNI reports it, the install is refused by preflight.cni
// with the way out, and nothing of the release exists: no release record,
// no controller Deployment. The same install with preflight.cni=false is
// deployed. (talosemu's kubelets always report Ready, so this case runs on
// envtest's API server; no pod runs there, so the install does not wait.)
func helmPreflightCNI(t *testing.T) {
	ctx := t.Context()

	env, err := testenv.Start(testenv.Options{})
	testenv.Must(t, err)
	t.Cleanup(func() { _ = env.Stop() })

	kc, err := env.KubeconfigYAML()
	testenv.Must(t, err)

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	testenv.Must(t, os.WriteFile(kubeconfig, kc, 0o600))

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1"}}
	testenv.Must(t, env.Client.Create(ctx, node))

	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message:           "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	testenv.Must(t, env.Client.Status().Update(ctx, node))

	cfg := helmConfig(t, kubeconfig)

	_, err = helmInstall(ctx, cfg, nil, false)
	for _, want := range []string{"preflight.cni", "no pod network", "node cp-1", "`ichor cni bootstrap --talosconfig FILE --node CONTROL-PLANE-ADDRESS`", "preflight.cni=false"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("helm install onto a cluster without a pod network: %v; want %q", err, want)
		}
	}

	if rels := helmReleases(t, cfg); len(rels) != 0 {
		t.Fatalf("the refused install left releases: %v", rels)
	}

	controller := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: icNamespace, Name: "ichor-controller"}, controller); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused install: Deployment ichor-controller: %v", err)
	}

	rel, err := helmInstall(ctx, cfg, map[string]any{"preflight": map[string]any{"cni": false}}, false)
	if err != nil {
		t.Fatalf("helm install with preflight.cni=false: %v", err)
	}

	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("with preflight.cni=false the release is %s", rel.Info.Status)
	}

	testenv.Must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: icNamespace, Name: "ichor-controller"}, controller))

	if args := controller.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--deployment-manager=helm") {
		t.Fatalf("the installed controller's args: %v", args)
	}
}

// installation is what the test reads of the IchorInstallation.
type installation struct {
	Spec struct {
		Version struct {
			Version string `json:"version"`
		} `json:"version"`
		Deployment struct {
			Manager string `json:"manager"`
		} `json:"deployment"`
	} `json:"spec"`
	Status struct {
		InstalledVersion string `json:"installedVersion"`
	} `json:"status"`
}

// helmManagedUpgradeRefused: a one-machine emulated Talos cluster made by
// `ichor init --install none` (the only way this repository bootstraps one;
// a local controller takes the first machine over), from which the local
// controller and the IchorInstallation init recorded are then removed, so
// the cluster holds Ichor's CRDs and the TalosCluster and no Ichor. The
// chart is installed with the Helm SDK and waited for: talosemu's pod runner
// runs its controller and ichor-ui pods as processes of this tree's
// binaries. The Helm-installed controller creates the IchorInstallation
// (through its own admission webhook, with the chart's RBAC) with manager
// helm and its version; `ichor upgrade ichor` to the next minor is then
// refused naming `helm upgrade`, so is a TalosOperation of type ichor
// written directly (the webhook), and no operation exists.
func helmManagedUpgradeRefused(t *testing.T) {
	start := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	w, err := startWorldIn(helmSubnet, 1, 1, helmPodSubnet)
	testenv.Must(t, err)

	t.Cleanup(func() {
		if w.ctrl != nil {
			stopProcess(w.ctrl)
		}

		stopProcess(w.emu)
	})
	t.Logf("world started in %s", time.Since(start).Round(time.Second))

	w.initLocal(t, ctx, helmCluster, w.machines[0].ip(), "6m")

	stopProcess(w.ctrl)
	w.ctrl = nil

	// This cluster's Ichor is to be Helm's: the installation init recorded
	// goes, and so do the users' roles init applied beside the CRDs (Helm
	// installs them with the release, and adopts no object it did not make).
	if out, err := w.kubectl(ctx, "delete", "ichorinstallation", "ichor", "--wait"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	for _, name := range install.UserRoles {
		if out, err := w.kubectl(ctx, "delete", "clusterrole,clusterrolebinding", name, "--ignore-not-found"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}

	t.Logf("cluster bootstrapped in %s", time.Since(start).Round(time.Second))

	// One node: one replica each, as on any single-node cluster.
	rel, err := helmInstall(ctx, helmConfig(t, w.kubeconfig), map[string]any{
		"controller": map[string]any{"replicas": 1},
		"ichorUI":    map[string]any{"replicas": 1},
	}, true)
	if err != nil {
		pods, _ := w.kubectl(ctx, "get", "pods", "-n", icNamespace, "-o", "wide")
		t.Fatalf("helm install: %v\npods:\n%s", err, pods)
	}

	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("the release is %s", rel.Info.Status)
	}

	t.Logf("helm install done in %s", time.Since(start).Round(time.Second))

	// A failure from here on shows what the Helm-installed controller logged.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}

		bg := context.Background()
		pods, _ := w.kubectl(bg, "get", "pods", "-n", icNamespace, "-o", "wide")
		logs, err := w.kubectl(bg, "logs", "-n", icNamespace, "deploy/ichor-controller", "--tail=120")
		t.Logf("pods:\n%s\nthe controller's log (%v):\n%s", pods, err, logs)

		// what the API server resolves the webhook Service with, and what
		// kube-controller-manager said of it
		conds, _ := w.kubectl(bg, "get", "pods", "-n", icNamespace, "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.conditions}{"\n"}{end}`)
		slices, _ := w.kubectl(bg, "get", "endpointslices", "-n", icNamespace, "-o", "yaml")
		t.Logf("pod conditions:\n%s\nEndpointSlices:\n%s\nkube-controller-manager on %s:\n%s",
			conds, slices, icNamespace, grepLogs(filepath.Join(w.dir, "machines"), "kube-controller-manager.log", icNamespace, 60))
	})

	var ii installation

	testenv.EventuallyEvery(t, 8*time.Minute, 2*time.Second, "the IchorInstallation with manager helm and its version", func() (bool, string) {
		ii = installation{}
		if err := w.kubeJSON(ctx, &ii, "get", "ichorinstallation", "ichor"); err != nil {
			return false, err.Error()
		}

		return ii.Spec.Deployment.Manager == "helm" && ii.Status.InstalledVersion == devVersion && ii.Spec.Version.Version == devVersion,
			fmt.Sprintf("%+v", ii)
	})

	// v0.0.0-dev's next minor.
	out, err := w.ichor(ctx, "upgrade", "ichor", "v0.1.0", "--cluster", helmCluster, "-y")
	for _, want := range []string{"Upgrading Ichor to v0.1.0 is refused; nothing was changed", "installed with Helm", "`helm upgrade`"} {
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("ichor upgrade ichor of a Helm-managed Ichor (%v) printed:\n%s\nwant %q", err, out, want)
		}
	}

	// The API server refuses the same operation through the webhook the
	// Helm-installed controller serves.
	var clusters struct {
		Items []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		} `json:"items"`
	}

	testenv.Must(t, w.kubeJSON(ctx, &clusters, "get", "talosclusters", "-A"))

	if len(clusters.Items) != 1 || clusters.Items[0].Metadata.Name != helmCluster {
		t.Fatalf("TalosClusters: %+v; want %s only", clusters.Items, helmCluster)
	}

	op := filepath.Join(w.dir, "ichor-operation.yaml")
	testenv.Must(t, os.WriteFile(op, []byte(`apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosOperation
metadata:
  name: ichor-v0-1-0
  namespace: `+clusters.Items[0].Metadata.Namespace+`
spec:
  clusterName: `+helmCluster+`
  type: ichor
  ichor:
    version: v0.1.0
`), 0o600))

	out, err = w.kubectl(ctx, "create", "-f", op)
	if err == nil || !strings.Contains(out, "`helm upgrade`") {
		t.Fatalf("kubectl create of an ichor operation on a Helm-managed Ichor (%v):\n%s", err, out)
	}

	var ops struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Type string `json:"type"`
			} `json:"spec"`
		} `json:"items"`
	}

	testenv.Must(t, w.kubeJSON(ctx, &ops, "get", "talosoperations", "-A"))

	for _, o := range ops.Items {
		if o.Spec.Type == "ichor" {
			t.Fatalf("TalosOperation %s of type ichor exists after the refusals", o.Metadata.Name)
		}
	}

	t.Logf("done in %s", time.Since(start).Round(time.Second))
}

// grepLogs returns the last max lines that mention what, of the files named
// name under dir.
func grepLogs(dir, name, what string, maxLines int) string {
	var lines []string

	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != name {
			return nil //nolint:nilerr // a directory that cannot be read has no log to show
		}

		b, err := os.ReadFile(p) //nolint:gosec // the test world's own log
		if err != nil {
			return nil //nolint:nilerr // as above
		}

		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.Contains(l, what) {
				lines = append(lines, p+": "+l)
			}
		}

		return nil
	})

	return strings.Join(lines[max(0, len(lines)-maxLines):], "\n")
}
