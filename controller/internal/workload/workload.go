// Package workload reaches a managed cluster's own Kubernetes API: a client
// built from the admin kubeconfig a control plane hands out (Talos's
// Kubeconfig RPC), the Node of a machine, kubectl's own cordon and drain
// helper, and one control plane's kube-apiserver /readyz. The removal, the
// provisioning and the config rollout share it.
package workload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubectl/pkg/drain"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// Timeout bounds every call to the workload cluster's API.
const Timeout = 20 * time.Second

// APIServerPort is the port Talos runs the kube-apiserver on.
const APIServerPort = 6443

// Func returns a client of a cluster's own Kubernetes API.
type Func func(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (kubernetes.Interface, error)

// Config fetches the admin kubeconfig from the first of the control planes
// that answers and returns its REST configuration. The kubeconfig stays in
// memory; an error names the machines, never the kubeconfig.
func Config(ctx context.Context, nodes *talos.Dialer, cluster string, cps []ichorv1alpha1.TalosMachine, b *secrets.Bundle) (*rest.Config, error) {
	var errs []error

	for _, cp := range cps {
		n, err := nodes.Dial(ctx, cp.Spec.Address, b)
		if err != nil {
			errs = append(errs, err)

			continue
		}

		kc, err := n.Kubeconfig(ctx)
		n.Close()

		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cp.Name, err))

			continue
		}

		cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			return nil, errors.New("the control plane's kubeconfig does not parse")
		}

		cfg.Timeout = Timeout

		return cfg, nil
	}

	if len(errs) == 0 {
		return nil, fmt.Errorf("cluster %s has no provisioned control plane to reach its Kubernetes API through", cluster)
	}

	return nil, fmt.Errorf("no control plane of cluster %s gave a kubeconfig: %w", cluster, errors.Join(errs...))
}

// Client is Config, as a clientset.
func Client(ctx context.Context, nodes *talos.Dialer, cluster string, cps []ichorv1alpha1.TalosMachine, b *secrets.Bundle) (kubernetes.Interface, error) {
	cfg, err := Config(ctx, nodes, cluster, cps, b)
	if err != nil {
		return nil, err
	}

	return kubernetes.NewForConfig(cfg)
}

// NodeAt finds the Node whose InternalIP is address; nil when none has it.
// name, when known (the machine's recorded Node, or the hostname its node
// reports), is read first: a Node of that name with that address is the
// answer without listing every Node of the cluster, which for a thousand
// machines each polled while they join would be a thousand lists of a
// thousand Nodes. Any other case lists.
func NodeAt(ctx context.Context, k kubernetes.Interface, name, address string) (*corev1.Node, error) {
	want := net.ParseIP(address)

	if name != "" {
		n, err := k.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && hasInternalIP(n, want):
			return n, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("get Node %s: %w", name, err)
		}
	}

	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}

	for i := range nodes.Items {
		if hasInternalIP(&nodes.Items[i], want) {
			return &nodes.Items[i], nil
		}
	}

	return nil, nil
}

func hasInternalIP(n *corev1.Node, ip net.IP) bool {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).Equal(ip) {
			return true
		}
	}

	return false
}

// NodeReady reports the Node's Ready condition.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func helper(ctx context.Context, k kubernetes.Interface, timeout time.Duration) *drain.Helper {
	var out, errOut bytes.Buffer

	return &drain.Helper{
		Ctx:                 ctx,
		Client:              k,
		Force:               false,
		GracePeriodSeconds:  -1,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		Timeout:             timeout,
		Out:                 &out,
		ErrOut:              &errOut,
	}
}

// Drain cordons and drains the Node with kubectl's own drain helper (it
// encodes the DaemonSet, mirror-pod, local-storage and PodDisruptionBudget
// rules). nodeDown skips waiting for deletions no kubelet will confirm.
func Drain(ctx context.Context, k kubernetes.Interface, node *corev1.Node, timeout time.Duration, nodeDown bool) error {
	h := helper(ctx, k, timeout)

	if nodeDown {
		h.SkipWaitForDeleteTimeoutSeconds = 1
	}

	if err := drain.RunCordonOrUncordon(h, node, true); err != nil {
		return fmt.Errorf("cordon: %w", err)
	}

	return drain.RunNodeDrain(h, node.Name)
}

// Uncordon makes the Node schedulable again.
func Uncordon(ctx context.Context, k kubernetes.Interface, node *corev1.Node) error {
	if err := drain.RunCordonOrUncordon(helper(ctx, k, Timeout), node, false); err != nil {
		return fmt.Errorf("uncordon: %w", err)
	}

	return nil
}

// APIServerReady asks one control plane's own kube-apiserver (at address,
// not the cluster endpoint) for /readyz with the admin credentials of cfg.
func APIServerReady(ctx context.Context, cfg *rest.Config, address string) error {
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + net.JoinHostPort(address, strconv.Itoa(APIServerPort))
	c.Timeout = 5 * time.Second

	k, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}

	body, err := k.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver at %s is not ready: %w", address, err)
	}

	if !bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
		return fmt.Errorf("kube-apiserver at %s answers /readyz with %q", address, body)
	}

	return nil
}

// CacheTTL is how long Cache keeps a cluster's client.
const CacheTTL = time.Minute

// Cache keeps one client per cluster and Kubernetes CA for CacheTTL, so that
// a reconciler polling many machines of a cluster does not fetch an admin
// kubeconfig from a control plane (a certificate issued by Talos) and open a
// new connection to the API server for each machine at each look. The
// kubeconfig stays in memory. The zero Cache is ready.
type Cache struct {
	mu      sync.Mutex
	entries map[string]cached
}

type cached struct {
	k  kubernetes.Interface
	at time.Time
}

// Client returns the cluster's client kept for c's cluster and b's
// Kubernetes CA when it is younger than CacheTTL at now, else the one build
// returns, which is kept.
func (c *Cache) Client(cl *ichorv1alpha1.TalosCluster, b *secrets.Bundle, now time.Time, build func() (kubernetes.Interface, error)) (kubernetes.Interface, error) {
	key := string(cl.UID) + "/" + cl.Namespace + "/" + cl.Name
	if b.Certs != nil && b.Certs.K8s != nil {
		sum := sha256.Sum256(b.Certs.K8s.Crt)
		key += "/" + hex.EncodeToString(sum[:])
	}

	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()

	if ok && now.Sub(e.at) < CacheTTL && now.Sub(e.at) >= 0 {
		return e.k, nil
	}

	k, err := build()
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()

	if c.entries == nil {
		c.entries = map[string]cached{}
	}

	for key, e := range c.entries {
		if now.Sub(e.at) >= CacheTTL {
			delete(c.entries, key)
		}
	}

	c.entries[key] = cached{k: k, at: now}

	return k, nil
}
