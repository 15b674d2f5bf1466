package render

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Control-plane metrics ports. Talos binds the controller-manager and the
// scheduler to 127.0.0.1 and probes them on 10257 and 10259
// (siderolabs/talos internal/app/machined/pkg/controllers/k8s/
// control_plane_static_pod.go, their argsbuilder defaults and liveness
// probes); etcd serves plain-HTTP metrics only where listen-metrics-urls
// points, 2381 by the Kubernetes convention, and Talos leaves that flag to
// cluster.etcd.extraArgs (internal/app/machined/pkg/system/services/etcd.go
// does not deny it).
const (
	ControllerManagerMetricsPort = 10257
	SchedulerMetricsPort         = 10259
	EtcdMetricsPort              = 2381
)

// MetricsRuleName is the NetworkRuleConfig that restricts scraping to spec.monitoring.scrapeCIDR.
const MetricsRuleName = "ichor-controlplane-metrics"

// metricsBindAddress is where exposed metrics listen: every address of the node.
const metricsBindAddress = "0.0.0.0"

const keyExtraArgs = "extraArgs"

// metricsDocs expose the control plane's metrics (spec.monitoring): on a
// control plane, controller-manager and scheduler bind-address and etcd's
// listen-metrics-urls on the node address instead of localhost. Under a
// contract with multi-document Kubernetes configuration the first two are
// KubeControllerManagerConfig and KubeSchedulerConfig extraArgs, before
// cluster.controllerManager/scheduler.extraArgs; etcd has no document of its
// own and stays in cluster.etcd.extraArgs under every contract.
//
// With scrapeCIDR a NetworkRuleConfig (machinery config/types/network
// rule_config.go) allows the three ports from that CIDR only. Ichor renders
// no NetworkDefaultActionConfig: the default action stays accept, under which
// Talos drops traffic to a rule's ports from outside its subnets and leaves
// every other port alone (siderolabs/talos internal/app/machined/pkg/
// controllers/network/nftables_chain_config.go: with DefaultActionAccept the
// rule's source match is inverted and its verdict is drop). A default-deny
// policy is the user's own choice, never Ichor's.
func metricsDocs(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract) ([]doc, error) {
	mon := c.Spec.Monitoring
	if !mon.ExposeControlPlaneMetrics || m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return nil, nil
	}

	bind := func() doc { return doc{keyExtraArgs: doc{"bind-address": metricsBindAddress}} }
	etcd := doc{"etcd": doc{keyExtraArgs: doc{"listen-metrics-urls": "http://" + net.JoinHostPort(metricsBindAddress, strconv.Itoa(EtcdMetricsPort))}}}

	var out []doc

	if vc.MultidocKubernetesConfigSupported() {
		out = append(out,
			multidoc("KubeControllerManagerConfig", bind()),
			multidoc("KubeSchedulerConfig", bind()),
			legacy(doc{keyCluster: etcd}),
		)
	} else {
		etcd["controllerManager"] = bind()
		etcd["scheduler"] = bind()
		out = append(out, legacy(doc{keyCluster: etcd}))
	}

	if mon.ScrapeCIDR == "" {
		return out, nil
	}

	prefix, err := netip.ParsePrefix(mon.ScrapeCIDR)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: spec.monitoring.scrapeCIDR %q is not a CIDR such as 10.0.0.0/16: %w", c.Name, mon.ScrapeCIDR, err)
	}

	return append(out, multidoc("NetworkRuleConfig", doc{
		keyName: MetricsRuleName,
		"portSelector": doc{
			"ports":    []any{ControllerManagerMetricsPort, SchedulerMetricsPort, EtcdMetricsPort},
			"protocol": "tcp",
		},
		"ingress": []any{doc{"subnet": prefix.Masked().String()}},
	})), nil
}
