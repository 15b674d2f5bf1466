package adoptflow

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
)

// ciliumInstallTimeout bounds the Helm run of the in-process install (its
// wait for the rollout included) and, again, the wait for Ready Nodes.
const ciliumInstallTimeout = 10 * time.Minute

// installCilium installs Ichor's pinned Cilium into a cluster that runs no
// CNI, in process, as Ichor's own Helm release kube-system/cilium
// (cilium.Apply, the ichor-cni Job's code), then waits until every Node is
// Ready (architecture, "ichor adopt", phase 3: Cilium, then Ichor, then the
// resources: Ichor's pods could not start without a pod network). A second
// run finds the release applied and changes nothing.
func (s *state) installCilium(ctx context.Context) error {
	var nodes corev1.NodeList

	if err := s.retry(ctx, func(ctx context.Context) error { return s.conn.Client.List(ctx, &nodes) }); err != nil {
		return s.conn.Explain(err, "listing the Nodes")
	}

	c := s.objs.Cluster
	req := cilium.Request{
		Version: s.plan.CiliumInstall.Chart, KubernetesVersion: strings.TrimPrefix(c.Spec.KubernetesVersion, "v"),
		Choices: ciliumvalues.Choices{Tunnel: c.Spec.CNI.Tunnel, KubeProxy: c.Spec.CNI.KubeProxy, Nodes: len(nodes.Items)},
	}

	if err := applyCilium(ctx, s.conn.Config, req, s.p); err != nil {
		return err
	}

	return waitNodesReady(ctx, s.conn.Client, s.p)
}

// applyCilium installs or upgrades Ichor's Cilium release as req asks,
// showing Helm's step lines.
func applyCilium(ctx context.Context, cfg *rest.Config, req cilium.Request, p *initflow.Progress) error {
	applied, err := cilium.Apply(ctx, cfg, req, ciliumInstallTimeout, progressWriter{p})
	if err != nil {
		return fmt.Errorf("installing Cilium %s: %w; run the same command again to continue", req.Version, err)
	}

	p.Detailf("Helm release %s/%s %s: chart %s, revision %d", cilium.Namespace, cilium.ReleaseName, applied.Action, applied.Version, applied.Revision)

	return nil
}

// waitNodesReady waits until every Node is Ready.
func waitNodesReady(ctx context.Context, c client.Reader, p *initflow.Progress) error {
	last := ""

	err := initflow.Poll(ctx, ciliumInstallTimeout, func(ctx context.Context) (bool, error) {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			last = err.Error()

			return false, nil //nolint:nilerr // asked again until the timeout
		}

		var notReady []string

		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				notReady = append(notReady, n.Name)
			}
		}

		if len(notReady) > 0 {
			if msg := "not Ready yet: " + strings.Join(notReady, ", "); msg != last {
				last = msg
				p.Detailf("%s", msg)
			}

			return false, nil
		}

		p.Detailf("%d Node(s) Ready", len(nodes.Items))

		return len(nodes.Items) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("the Nodes are not Ready within %s after Cilium's install (%s): see `kubectl -n %s get pods -l k8s-app=cilium`, then run the same command again",
			ciliumInstallTimeout, last, cilium.Namespace)
	}

	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// progressWriter shows Helm's step lines (never values) as details.
type progressWriter struct{ p *initflow.Progress }

func (w progressWriter) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" {
			w.p.Detailf("%s", line)
		}
	}

	return len(b), nil
}

// ciliumInstallTitle is the step's title.
func ciliumInstallTitle(c *ichorv1alpha1.TalosCluster, chart string) string {
	return fmt.Sprintf("Cilium %s installed in process as Helm release %s/%s of cluster %s; every Node Ready", chart, cilium.Namespace, cilium.ReleaseName, c.Name)
}
