package adoptflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/kube"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// TakeoverOptions are the Cilium takeover check's inputs besides the plan.
type TakeoverOptions struct {
	// Talosconfig and TalosPort read the admin kubeconfig from the first
	// control plane (a read, as `talosctl kubeconfig` does).
	Talosconfig []byte
	TalosPort   int
	// AcceptDiff and AcceptChanges are --accept-cilium-diff and --accept-cilium-changes.
	AcceptDiff, AcceptChanges bool
}

// CheckTakeover runs the Cilium takeover check of a plan that would write
// the cilium preset (architecture, "Cilium", "Takeover"), read-only, over
// the cluster's Kubernetes API, and records it in the plan: the check's
// refusals become the plan's. A cluster with no CNI at all gets the plan of
// installing Ichor's pinned Cilium instead (adopt.CheckCiliumInstall).
func CheckTakeover(ctx context.Context, p *adopt.Plan, o TakeoverOptions) error {
	if p.Refused() || p.Cluster.CNIPreset != ichorv1alpha1.CNIPresetCilium {
		return nil
	}

	var addr string

	for _, m := range p.Machines {
		if m.Role == ichorv1alpha1.RoleControlPlane {
			addr = m.Address

			break
		}
	}

	unread := func(err error) {
		p.Refusals = append(p.Refusals, guard.Refusal{
			Field: "cni",
			Rule:  fmt.Sprintf("the running Cilium could not be read over the cluster's Kubernetes API (%v); the takeover is checked before anything is written", err),
			WayOut: "make the cluster's API server reachable from here and run the command again, " +
				"or add --cni-unmanaged to adopt the cluster with its Cilium left as it runs",
		})
	}

	kc, err := AdminKubeconfig(ctx, addr, o.TalosPort, o.Talosconfig, "", time.Minute)
	if err != nil {
		unread(err)

		return nil
	}

	c, err := readClient(ctx, kc)
	if err != nil {
		unread(err)

		return nil
	}

	live, err := adopt.ReadCiliumLive(ctx, c)
	if err != nil {
		unread(err)

		return nil
	}

	name, objects := p.CiliumInline()
	if name == "" && live.DaemonSet == nil {
		// No CNI at all: the write installs Ichor's Cilium first.
		p.AddInstall(adopt.CheckCiliumInstall(live, p.KubePrisms()))

		return nil
	}

	t, err := adopt.CheckCiliumTakeover(ctx, live, adopt.TakeoverInput{
		KubernetesVersion: p.Cluster.KubernetesVersion, KubeProxy: kubeProxyMode(p),
		InlineManifest: name, Foreign: objects, KubePrism: p.KubePrisms(),
		AcceptDiff: o.AcceptDiff, AcceptChanges: o.AcceptChanges,
	}, adopt.GetLive(c))
	if err != nil {
		return fmt.Errorf("checking the running Cilium: %w", err)
	}

	p.AddTakeover(t)

	return nil
}

// readClient is a client of the cluster's API server for the check's reads,
// tried once: the plan does not wait for an API server that does not answer.
func readClient(ctx context.Context, kubeconfig []byte) (client.Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, errors.New("the node's admin kubeconfig does not parse")
	}

	cfg.Timeout = 30 * time.Second
	// client-go's discovery logs through klog; the refusal shows the error.
	klog.SetLogger(logr.Discard())

	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", cfg.Host, err)
	}

	if err := c.List(ctx, &corev1.NamespaceList{}, client.Limit(1)); err != nil {
		return nil, fmt.Errorf("the API server at %s: %w", cfg.Host, err)
	}

	return c, nil
}

func kubeProxyMode(p *adopt.Plan) string {
	if p.Cluster.KubeProxy {
		return ichorv1alpha1.KubeProxyEnabled
	}

	return ichorv1alpha1.KubeProxyReplaced
}
