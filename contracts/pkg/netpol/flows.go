package netpol

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Cilium's entities for the peers that have no pod of their own.
const (
	// EntityHost is the local node: the kubelet's probes.
	EntityHost = "host"
	// EntityRemoteNode is another node: the API server's calls to a pod on
	// another node arrive from its cilium_host address.
	EntityRemoteNode = "remote-node"
	// EntityKubeAPIServer is the kube-apiserver.
	EntityKubeAPIServer = "kube-apiserver"
	// EntityWorld is everything outside the cluster.
	EntityWorld = "world"
)

// The protocols of a flow.
const (
	TCP = "TCP"
	UDP = "UDP"
)

// AppLabel is the label the policies select Ichor's pods by.
const AppLabel = "app.kubernetes.io/name"

// Peer is one end of a flow: a Cilium entity, or a pod.
type Peer struct {
	// Entity is the peer's entity; empty for a pod.
	Entity string
	// Namespace is a pod's namespace.
	Namespace string
	// Labels are a pod's labels.
	Labels map[string]string
	// Host is the address or DNS name of a peer outside the cluster
	// (Entity is then world).
	Host string
}

// External is a peer outside the cluster at host, an IP address or a DNS
// name: the world entity, which toCIDR and toFQDNs rules select by host.
func External(host string) Peer { return Peer{Entity: EntityWorld, Host: host} }

// Entity is the peer of a Cilium entity.
func Entity(name string) Peer { return Peer{Entity: name} }

// Pod is a pod of namespace with labels given as key, value pairs.
func Pod(namespace string, kv ...string) Peer {
	labels := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}

	return Peer{Namespace: namespace, Labels: labels}
}

// App is Ichor's pod named name (its app.kubernetes.io/name) in namespace.
func App(namespace, name string) Peer { return Pod(namespace, AppLabel, name) }

func (p Peer) String() string {
	if p.Host != "" {
		return p.Host
	}

	if p.Entity != "" {
		return p.Entity
	}

	if name, ok := p.Labels[AppLabel]; ok && len(p.Labels) == 1 {
		return p.Namespace + "/" + name
	}

	kv := make([]string, 0, len(p.Labels))
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		kv = append(kv, k+"="+p.Labels[k])
	}

	return p.Namespace + "/{" + strings.Join(kv, ",") + "}"
}

// Flow is one connection a pod of Ichor's opens or accepts.
type Flow struct {
	// From opens the connection to To.
	From, To Peer
	// Port is To's port.
	Port int
	// Protocol is TCP or UDP.
	Protocol string
	// PortName is the name of Port in To's container when To is Ichor's pod
	// (kustomize/base names it); empty otherwise.
	PortName string
	// Policy is the one policy that allows the flow.
	Policy string
	// Why says what the flow is for.
	Why string
}

func (f Flow) String() string {
	return fmt.Sprintf("%s -> %s %d/%s", f.From, f.To, f.Port, f.Protocol)
}

// Ports of Ichor's pods (kustomize/base/manager and kustomize/base/ui name
// them; a test holds the two together) and of its peers.
const (
	ControllerWebhookPort = 9443
	ControllerMetricsPort = 8080
	ControllerHealthPort  = 8081
	UIHTTPSPort           = 8443
	UIOIDCPort            = 8444
	UIMetricsPort         = 8445
	// KubeAPIServerPort is the kube-apiserver's port on a Talos control plane.
	KubeAPIServerPort = 6443
	// DNSPort is kube-dns's port.
	DNSPort = 53
)

// KubeDNS is the cluster's DNS pods (CoreDNS on Talos).
func KubeDNS() Peer { return Pod("kube-system", "k8s-app", "kube-dns") }

// Flows are the flows Ichor's pods in namespace use, each with the policy of
// Policies(namespace, opts) that allows it. The metrics flows are there only
// when opts names a metrics namespace; their scraper is a pod of it.
func Flows(namespace string, opts Options) []Flow {
	controller := App(namespace, ControllerPolicy)
	ui := App(namespace, UIPolicy)
	installer := App(namespace, InstallerPolicy)
	apiserver, remoteNode, host := Entity(EntityKubeAPIServer), Entity(EntityRemoteNode), Entity(EntityHost)

	// The container ports' names in kustomize/base.
	const webhook, health, https, oidc, metrics = "webhook", "health", "https", "oidc", "metrics"

	flows := []Flow{
		{From: apiserver, To: controller, Port: ControllerWebhookPort, Protocol: TCP, PortName: webhook, Policy: ControllerPolicy,
			Why: "the API server calls the admission webhooks (Service ichor-webhook)"},
		{From: remoteNode, To: controller, Port: ControllerWebhookPort, Protocol: TCP, PortName: webhook, Policy: ControllerPolicy,
			Why: "the API server's webhook calls to a pod on another node arrive from that control plane's cilium_host address"},
		{From: host, To: controller, Port: ControllerHealthPort, Protocol: TCP, PortName: health, Policy: ControllerPolicy,
			Why: "the kubelet's liveness and readiness probes"},
		{From: controller, To: apiserver, Port: KubeAPIServerPort, Protocol: TCP, Policy: ControllerPolicy,
			Why: "the controller's watches and writes, leader election"},
		{From: controller, To: KubeDNS(), Port: DNSPort, Protocol: UDP, Policy: ControllerPolicy,
			Why: "names of S3 stores and release sources"},
		{From: controller, To: KubeDNS(), Port: DNSPort, Protocol: TCP, Policy: ControllerPolicy,
			Why: "DNS answers too large for UDP"},

		{From: Entity(EntityWorld), To: ui, Port: UIHTTPSPort, Protocol: TCP, PortName: https, Policy: UIPolicy,
			Why: "browsers through a LoadBalancer that keeps client addresses"},
		{From: Pod("ingress", "app.kubernetes.io/name", "ingress-nginx"), To: ui, Port: UIHTTPSPort, Protocol: TCP, PortName: https, Policy: UIPolicy,
			Why: "browsers through an Ingress or Gateway controller, in a namespace Ichor cannot know"},
		{From: host, To: ui, Port: UIHTTPSPort, Protocol: TCP, PortName: https, Policy: UIPolicy,
			Why: "the kubelet's liveness and readiness probes"},
		{From: apiserver, To: ui, Port: UIOIDCPort, Protocol: TCP, PortName: oidc, Policy: UIPolicy,
			Why: "the API server fetches the issuer's discovery document and keys"},
		{From: remoteNode, To: ui, Port: UIOIDCPort, Protocol: TCP, PortName: oidc, Policy: UIPolicy,
			Why: "the same, from an API server on another node"},
		{From: ui, To: apiserver, Port: KubeAPIServerPort, Protocol: TCP, Policy: UIPolicy,
			Why: "every console call, impersonating its user"},
		{From: ui, To: KubeDNS(), Port: DNSPort, Protocol: UDP, Policy: UIPolicy,
			Why: "an external OIDC provider's name"},
		{From: ui, To: KubeDNS(), Port: DNSPort, Protocol: TCP, Policy: UIPolicy,
			Why: "DNS answers too large for UDP"},

		{From: installer, To: apiserver, Port: KubeAPIServerPort, Protocol: TCP, Policy: InstallerPolicy,
			Why: "the installer applies the manifest, waits and rolls back through the API server"},
	}

	if opts.MetricsNamespace != "" {
		prometheus := Pod(opts.MetricsNamespace, AppLabel, "prometheus")
		flows = append(flows,
			Flow{From: prometheus, To: controller, Port: ControllerMetricsPort, Protocol: TCP, PortName: metrics, Policy: ControllerMetricsPolicy,
				Why: "Prometheus scrapes the controller's /metrics"},
			Flow{From: prometheus, To: ui, Port: UIMetricsPort, Protocol: TCP, PortName: metrics, Policy: UIMetricsPolicy,
				Why: "Prometheus scrapes ichor-ui's /metrics"},
		)
	}

	return flows
}
