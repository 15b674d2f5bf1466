package adoptflow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// BootstrapOptions are the inputs of `ichor cni bootstrap`.
type BootstrapOptions struct {
	// Talosconfig and TalosPort reach the machines with the operator's own
	// credentials; ControlPlane is the control plane the admin kubeconfig
	// and the cluster's facts are read from.
	Talosconfig  []byte
	TalosPort    int
	ControlPlane string
	// Tunnel is Cilium's tunnel protocol (vxlan or geneve).
	Tunnel string
}

// BootstrapMachine is one Node as the check read it over the Talos API.
type BootstrapMachine struct {
	Node    string `json:"node"`
	Address string `json:"address"`
	// KubePrismPort is zero when KubePrism is off; KubePrismHealthy is its
	// health as the machine reports it.
	KubePrismPort    int  `json:"kubePrismPort"`
	KubePrismHealthy bool `json:"kubePrismHealthy"`
}

// BootstrapPlan is what `ichor cni bootstrap` found and would do: install
// Ichor's pinned Cilium into a Talos cluster that has no pod network, as
// `ichor adopt` does for such a cluster (architecture, "Deployment": the
// Helm chart refuses a cluster without one, preflight.cni).
type BootstrapPlan struct {
	Cluster           string `json:"cluster"`
	KubernetesVersion string `json:"kubernetesVersion"`
	// KubeProxy is enabled (Talos deploys kube-proxy) or replaced.
	KubeProxy string `json:"kubeProxy"`
	Tunnel    string `json:"tunnel"`
	// Install is the install's check; Running says what runs instead when
	// Cilium's Helm release is deployed already (then nothing is installed).
	Install  *adopt.CiliumInstall `json:"install,omitempty"`
	Running  string               `json:"running,omitempty"`
	Machines []BootstrapMachine   `json:"machines"`
	// Refusals stop the bootstrap; nothing is written.
	Refusals []guard.Refusal `json:"refusals,omitempty"`

	kubeconfig []byte
	nodes      int
}

// Refused is true when the bootstrap may not run.
func (p *BootstrapPlan) Refused() bool { return len(p.Refusals) > 0 }

// Kubeconfig is the admin kubeconfig read from the control plane.
func (p *BootstrapPlan) Kubeconfig() []byte { return p.kubeconfig }

// PlanBootstrap reads the cluster, read-only: the admin kubeconfig from the
// control plane (as `talosctl kubeconfig` does), the control plane's
// configuration (Kubernetes version, kube-proxy), the running CNI over the
// Kubernetes API, and each Node's KubePrism over the Talos API at the
// Node's internal address. It refuses what `ichor adopt` refuses for a
// cluster with no CNI (adopt.CheckCiliumBootstrap), and a Cilium that runs
// without being a Helm release (the cluster has a pod network: the chart
// installs there, and `ichor adopt` takes that Cilium over).
func PlanBootstrap(ctx context.Context, o BootstrapOptions) (*BootstrapPlan, error) {
	p := &BootstrapPlan{Tunnel: o.Tunnel}

	cp, facts, err := readMachine(ctx, o, o.ControlPlane)
	if err != nil {
		return nil, err
	}

	if facts.Role != ichorv1alpha1.RoleControlPlane {
		return nil, fmt.Errorf("%s is a worker: give a control plane's address with --node (the admin kubeconfig is read from it)", o.ControlPlane)
	}

	p.Cluster, p.KubernetesVersion = facts.ClusterName, facts.KubernetesVersion

	p.KubeProxy = ichorv1alpha1.KubeProxyReplaced
	if facts.KubeProxy {
		p.KubeProxy = ichorv1alpha1.KubeProxyEnabled
	}

	if p.kubeconfig, err = AdminKubeconfig(ctx, o.ControlPlane, o.TalosPort, o.Talosconfig, "", time.Minute); err != nil {
		return nil, err
	}

	c, err := readClient(ctx, p.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster over its Kubernetes API: %w", err)
	}

	live, err := adopt.ReadCiliumLive(ctx, c)
	if err != nil {
		return nil, err
	}

	p.nodes = live.Nodes

	if p.Running = runningRelease(live); p.Running != "" {
		return p, nil
	}

	if live.DaemonSet != nil && len(live.HelmRecords) == 0 {
		p.Refusals = append(p.Refusals, guard.Refusal{
			Field: "cni",
			Rule: fmt.Sprintf("the cluster runs Cilium already (DaemonSet %s/cilium), not as a Helm release: it has a pod network, and `ichor cni bootstrap` "+
				"installs one only where there is none", cilium.Namespace),
			WayOut: "install Ichor as you meant to (with Helm, preflight.cni passes once the Nodes are Ready); `ichor adopt` takes this Cilium over",
		})

		return p, nil
	}

	prisms := map[string]adopt.KubePrism{}

	if p.Machines, err = readPrisms(ctx, o, c, cp, facts, prisms); err != nil {
		return nil, err
	}

	p.Install = adopt.CheckCiliumBootstrap(live, prisms)
	p.Refusals = append(p.Refusals, p.Install.Refusals...)

	return p, nil
}

// runningRelease describes Cilium's Helm release kube-system/cilium when its
// newest record is deployed and the DaemonSet exists ("" otherwise): a
// second run finds the network there and changes nothing. Helm's Secrets
// driver labels each record with its status and revision
// (helm.sh/helm/v3 pkg/storage/driver/secrets.go).
func runningRelease(live *adopt.CiliumLive) string {
	if live.DaemonSet == nil || len(live.HelmRecords) == 0 {
		return ""
	}

	newest := slices.MaxFunc(live.HelmRecords, func(a, b corev1.Secret) int {
		return revision(a) - revision(b)
	})

	if newest.Labels["status"] != "deployed" {
		return ""
	}

	version := ""
	if live.DaemonSet.Labels != nil {
		version = live.DaemonSet.Labels["app.kubernetes.io/version"]
	}

	return strings.TrimSpace(fmt.Sprintf("Helm release %s/%s, revision %d deployed %s", cilium.Namespace, cilium.ReleaseName, revision(newest), version))
}

func revision(s corev1.Secret) int {
	var v int

	_, _ = fmt.Sscan(s.Labels["version"], &v)

	return v
}

// readMachine reads one machine with the operator's talosconfig: its
// KubePrism and the facts of its configuration.
func readMachine(ctx context.Context, o BootstrapOptions, addr string) (adopt.Machine, adopt.Facts, error) {
	n, err := talos.DialTalosconfigNode(ctx, addr, o.TalosPort, o.Talosconfig)
	if err != nil {
		return adopt.Machine{}, adopt.Facts{}, fmt.Errorf("reaching %s with the talosconfig: %s", addr, talos.Message(err))
	}
	defer n.Close()

	m, err := adopt.Read(ctx, n, addr)
	if err != nil {
		return m, adopt.Facts{}, fmt.Errorf("reading %s with the talosconfig: %s; is it a machine of this cluster, and the talosconfig this cluster's (os:admin)?", addr, talos.Message(err))
	}

	cfg, err := adopt.ParseConfig(m.Config)
	if err != nil {
		return m, adopt.Facts{}, fmt.Errorf("%s: %w", addr, err)
	}

	f, err := adopt.ReadFacts(cfg)
	if err != nil {
		return m, f, fmt.Errorf("%s: %w", addr, err)
	}

	return m, f, nil
}

// readPrisms reads KubePrism on every Node's machine, at the Node's
// internal address (the control plane given is read already).
func readPrisms(ctx context.Context, o BootstrapOptions, c client.Reader, cp adopt.Machine, cpFacts adopt.Facts, prisms map[string]adopt.KubePrism) ([]BootstrapMachine, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing the Nodes: %w", err)
	}

	out := make([]BootstrapMachine, 0, len(nodes.Items))

	for _, n := range nodes.Items {
		addr := internalIP(&n)
		if addr == "" {
			return nil, fmt.Errorf("the Node %s has no InternalIP address to reach its machine's Talos API at", n.Name)
		}

		bm := BootstrapMachine{Node: n.Name, Address: addr}

		if addr == o.ControlPlane {
			bm.KubePrismPort, bm.KubePrismHealthy = cpFacts.KubePrismPort, cp.KubePrismHealthy
		} else {
			m, f, err := readMachine(ctx, o, addr)
			if err != nil {
				return nil, fmt.Errorf("the Node %s: %w", n.Name, err)
			}

			bm.KubePrismPort, bm.KubePrismHealthy = f.KubePrismPort, m.KubePrismHealthy
		}

		prisms[addr] = adopt.KubePrism{Port: bm.KubePrismPort, Healthy: bm.KubePrismHealthy}
		out = append(out, bm)
	}

	return out, nil
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}

	return ""
}

// Bootstrap installs Ichor's pinned Cilium as planned, in process, as
// Ichor's own Helm release kube-system/cilium (cilium.Apply, the ichor-cni
// Job's code and `ichor adopt`'s), then waits until every Node is Ready.
// A plan that found the release deployed only waits for the Nodes. A
// second run after a failure continues: Apply upgrades over a failed or
// interrupted release.
func Bootstrap(ctx context.Context, p *BootstrapPlan, pr *initflow.Progress) error {
	pr.Step("Kubernetes API")

	conn, err := initflow.Connect(ctx, p.kubeconfig, cilium.Namespace, pr)
	if err != nil {
		pr.Fail()

		return err
	}

	if p.Install != nil {
		pr.Step(fmt.Sprintf("Cilium %s installed in process as Helm release %s/%s of cluster %s", p.Install.Chart, cilium.Namespace, cilium.ReleaseName, p.Cluster))

		req := cilium.Request{
			Version: p.Install.Chart, KubernetesVersion: strings.TrimPrefix(p.KubernetesVersion, "v"),
			Choices: ciliumvalues.Choices{Tunnel: p.Tunnel, KubeProxy: p.KubeProxy, Nodes: p.nodes},
		}

		if err := applyCilium(ctx, conn.Config, req, pr); err != nil {
			pr.Fail()

			return err
		}
	}

	pr.Step("Every Node Ready")

	if err := waitNodesReady(ctx, conn.Client, pr); err != nil {
		pr.Fail()

		return err
	}

	pr.Done()

	return nil
}
