package talosemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kube-apiserver's own connections to Service ClusterIPs. On a Talos node kube-apiserver
// runs on the host network, and kube-proxy (or Cilium's socket load-balancing) sends a
// connection to a ClusterIP to one of the Service's endpoints; a structured authentication
// configuration relies on it, whose discoveryURL names ichor-ui's ClusterIP (architecture,
// "Deployment": the kube-apiserver reads the issuer's discovery and keys from port 8444).
// Nothing on this machine routes ClusterIPs, so each kube-apiserver runs with HTTPS_PROXY
// naming this world's service proxy, a CONNECT proxy on loopback, and NO_PROXY naming
// everything else it dials (loopback: etcd, kubelets, the Talos-style endpoints; the pod
// CIDRs: webhooks and aggregated APIs, which reach pods through the egress selector). The
// OIDC client honours them: k8s.io/apiserver/plugin/pkg/authenticator/token/oidc builds its
// transport with k8s.io/apimachinery/pkg/util/net.SetTransportDefaults, whose proxy is
// http.ProxyFromEnvironment with CIDR rules in NO_PROXY. The proxy maps ClusterIP:port to a
// ready endpoint's pod, as kube-proxy would, and from there on is the egress proxy.

// startServiceProxy listens on loopback for the kube-apiservers' CONNECTs to ClusterIPs.
func (w *World) startServiceProxy(ctx context.Context) error {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}

	w.svcProxyLis = lis
	w.egressWG.Add(1)

	go func() {
		defer w.egressWG.Done()

		w.serveEgress(ctx, lis)
	}()

	return nil
}

// serviceProxyEnv is the environment of a kube-apiserver: its connections to ClusterIPs go
// through the service proxy, everything else directly.
func (w *World) serviceProxyEnv(podCIDRs []string) []string {
	if w.svcProxyLis == nil {
		return nil
	}

	noProxy := append([]string{"127.0.0.0/8", "localhost", "::1"}, podCIDRs...)
	p := "http://" + w.svcProxyLis.Addr().String()

	return []string{"HTTPS_PROXY=" + p, "https_proxy=" + p, "NO_PROXY=" + strings.Join(noProxy, ","), "no_proxy=" + strings.Join(noProxy, ",")}
}

// serviceTarget maps a Service's ClusterIP and port to a ready endpoint's loopback address
// and target port ("" when host is no ClusterIP of the cluster).
func (w *World) serviceTarget(ctx context.Context, host string, port int) (string, error) {
	if !parseAddr(host).IsValid() {
		// Not an address: no ClusterIP.
		return "", nil
	}

	var m *Machine

	for _, c := range w.machines {
		if c.isControlPlane() && c.Powered() {
			m = c

			break
		}
	}

	if m == nil {
		return "", nil
	}

	k, err := m.adminClient()
	if err != nil {
		return "", err
	}

	svcs, err := k.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}

	for i := range svcs.Items {
		s := &svcs.Items[i]
		if s.Spec.ClusterIP != host {
			continue
		}

		for _, sp := range s.Spec.Ports {
			if int(sp.Port) == port && sp.Protocol != corev1.ProtocolUDP {
				return w.endpointOf(ctx, k.DiscoveryV1().EndpointSlices(s.Namespace), s.Name, sp.Name)
			}
		}

		return "", fmt.Errorf("talosemu service proxy: Service %s/%s has no port %d", s.Namespace, s.Name, port)
	}

	return "", nil
}

// endpointOf is the loopback address and port of a ready endpoint of the Service's port.
func (w *World) endpointOf(ctx context.Context, slices interface {
	List(context.Context, metav1.ListOptions) (*discoveryv1.EndpointSliceList, error)
}, service, portName string,
) (string, error) {
	list, err := slices.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return "", err
	}

	for _, es := range list.Items {
		var port int32

		for _, p := range es.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				port = *p.Port
			}
		}

		if port == 0 {
			continue
		}

		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}

			for _, a := range ep.Addresses {
				if l := w.podLoopback(a); l != "" {
					return net.JoinHostPort(l, strconv.Itoa(int(port))), nil
				}
			}
		}
	}

	return "", errors.New("talosemu service proxy: Service " + service + " has no ready endpoint run by talosemu")
}

// parseAddr is host as an address, the zero Addr when it is none.
func parseAddr(host string) netip.Addr {
	a, _ := netip.ParseAddr(host)

	return a
}
