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

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// podFlow is a flow of talosemu's GET /flows (tools/talosemu/flows.go
// PodFlow, read as JSON: the e2e binary does not link the emulator).
type podFlow struct {
	Namespace        string            `json:"namespace"`
	Pod              string            `json:"pod"`
	Labels           map[string]string `json:"labels"`
	HostNetwork      bool              `json:"hostNetwork"`
	Node             string            `json:"node"`
	Inbound          bool              `json:"inbound"`
	Port             int               `json:"port"`
	Peer             string            `json:"peer"`
	PeerPod          string            `json:"peerPod"`
	PeerLabels       map[string]string `json:"peerLabels"`
	PeerMachine      string            `json:"peerMachine"`
	PeerNode         string            `json:"peerNode"`
	PeerControlPlane bool              `json:"peerControlPlane"`
	Seen             int               `json:"seen"`
}

// The peers of inbound flows (talosemu.PeerKubeAPIServer, PeerKubelet).
const (
	peerKubeAPIServer = "kube-apiserver"
	peerKubelet       = "kubelet"
)

// flowWindow is how long the flows in use are watched once the policies
// are in place.
const flowWindow = 30 * time.Second

// TestNetworkPolicyFlows checks the CiliumNetworkPolicies the in-cluster
// controller applies to ichor-system against the flows Ichor's pods really
// use in the emulated world, seen by the emulator (tools/talosemu/flows.go:
// the API server's calls through its egress proxy, the kubelet's probes, and
// every pod process's established connections).
//
// Cilium registers its CRDs when it starts; the emulated Cilium runs no
// process, so the test creates Cilium's own CiliumNetworkPolicy CRD (read
// from Cilium's module) as Cilium would, and the controller, which looks
// again while the CRD is missing, applies the set: NetworkPoliciesApplied
// turns True. Then, over flowWindow (an admission call and a requested
// drift check made in it, every 2 s), every
// flow of a pod of ichor-system that the emulator sees in use must be
// allowed by the policies read back from the API server, evaluated as
// Cilium would (netpol.Allows); the test lists each flow with the policy
// that allows it, and checks that without that policy the flow is denied
// (the default deny holds). The flows a policy set must never miss are
// required to have been seen: the controller's and ichor-ui's API server
// connections, the controller's Talos API connections, the webhook call and
// the probes. Host-network pods (the ichor-cni Job) are Cilium's host
// endpoint, which these pod policies do not select; they are listed, not
// evaluated.
func TestNetworkPolicyFlows(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	crd := testenv.CiliumNetworkPolicyCRD(t, bootCilium)
	crd.ResourceVersion = ""

	data, err := yaml.Marshal(crd)
	testenv.Must(t, err)

	file := filepath.Join(w.dir, "cnp-crd.yaml")
	testenv.Must(t, os.WriteFile(file, data, 0o600))

	if out, err := w.kubectl(ctx, "apply", "--server-side", "-f", file); err != nil {
		t.Fatalf("creating Cilium's CRD: %v\n%s", err, out)
	}

	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "NetworkPoliciesApplied=True", func() (bool, string) {
		out, err := w.kubectl(ctx, "get", "taloscluster", "-n", icNamespace, cluster, "-o",
			`jsonpath={.status.conditions[?(@.type=="NetworkPoliciesApplied")].status} {.status.conditions[?(@.type=="NetworkPoliciesApplied")].message}`)
		if err != nil {
			return false, err.Error()
		}

		return strings.HasPrefix(out, "True "), out
	})

	before, err := w.flows(ctx)
	testenv.Must(t, err)

	// An admission call inside the window: the API server calls the
	// controller's webhook.
	reclaim := w.refusedReclaim(t, "e2e-netpol")

	var inUse []podFlow

	deadline := time.Now().Add(flowWindow)
	for {
		if out, err := w.kubectl(ctx, "create", "--dry-run=server", "-f", reclaim); err == nil || !strings.Contains(out, "the foreign credential lives at most") {
			t.Fatalf("the webhook did not refuse the MachineReclaim: %v\n%s", err, out)
		}

		// and a drift check now rather than at the next poll: the
		// controller's calls to the Talos API
		if out, err := w.kubectl(ctx, "annotate", "talosmachines", "--all", "-n", icNamespace, "--overwrite",
			fmt.Sprintf("%s=%d", ichorv1alpha1.ReconcileRequestedAnnotation, time.Now().UnixNano())); err != nil {
			t.Fatalf("requesting a reconcile: %v\n%s", err, out)
		}

		after, err := w.flows(ctx)
		testenv.Must(t, err)

		inUse = flowsInUse(before, after)

		missing := requiredFlowsMissing(inUse)
		if len(missing) == 0 && time.Now().After(deadline) {
			break
		}

		if time.Now().After(deadline.Add(2 * time.Minute)) {
			t.Fatalf("flows every policy set must allow were not seen in use: %s\nseen:\n%s", strings.Join(missing, "; "), describeFlows(inUse))
		}

		time.Sleep(2 * time.Second)
	}

	var list struct {
		Items []map[string]any `json:"items"`
	}

	testenv.Must(t, w.kubeJSON(ctx, &list, "get", "ciliumnetworkpolicies", "-n", icNamespace))

	policies := make([]*unstructured.Unstructured, 0, len(list.Items))
	for _, it := range list.Items {
		policies = append(policies, &unstructured.Unstructured{Object: it})
	}

	if len(policies) == 0 {
		t.Fatal("NetworkPoliciesApplied is True but ichor-system has no CiliumNetworkPolicy")
	}

	evaluated := 0

	for _, pf := range inUse {
		if pf.Namespace != icNamespace {
			continue
		}

		if pf.HostNetwork {
			t.Logf("host network, not selected by the pod policies: %s", describeFlow(pf))

			continue
		}

		// A pod dialling its own address (controller-runtime's webhook
		// StartedChecker, behind the readiness probe, dials the webhook
		// server's own Host:Port: sigs.k8s.io/controller-runtime
		// pkg/webhook/server.go): Linux routes a packet to a local address
		// through the loopback device, so in a real pod it never reaches the
		// pod's veth, where Cilium enforces policy. The pod runner's processes
		// share the host's loopback, which is why the emulator sees it at all.
		if pf.PeerPod == pf.Namespace+"/"+pf.Pod {
			t.Logf("within the pod (its own address, the loopback device), not subject to policy: %s", describeFlow(pf))

			continue
		}

		f := policyFlow(pf)

		names, ok, err := netpol.Allows(policies, f)
		if err != nil {
			t.Fatalf("%s: %v", describeFlow(pf), err)
		}

		if !ok {
			t.Errorf("DENIED by the applied policies, yet in use: %s (as %s)", describeFlow(pf), f)

			continue
		}

		evaluated++

		t.Logf("%-70s allowed by %s", describeFlow(pf), names)

		// Without the policies that allow it, the default deny refuses it.
		rest := slices.DeleteFunc(slices.Clone(policies), func(o *unstructured.Unstructured) bool {
			return slices.Contains(strings.Split(names, ", "), o.GetName())
		})

		if _, still, err := netpol.Allows(rest, f); err == nil && still {
			t.Errorf("%s is allowed even without %s: the default deny does not hold", describeFlow(pf), names)
		}
	}

	if evaluated == 0 {
		t.Fatal("no flow of a pod of ichor-system was evaluated")
	}
}

// flows reads the emulator's record of the pods' flows (GET /flows).
func (w *world) flows(ctx context.Context) ([]podFlow, error) {
	var out []podFlow

	return out, w.controlGet(ctx, "/flows", &out)
}

func flowKey(f podFlow) string {
	return fmt.Sprintf("%s/%s %t %d %s", f.Namespace, f.Pod, f.Inbound, f.Port, f.Peer)
}

// flowsInUse are the flows of after seen again since before: the ones in
// use now (a flow of an object deleted since, or of a pod gone, is not).
func flowsInUse(before, after []podFlow) []podFlow {
	seen := map[string]int{}
	for _, f := range before {
		seen[flowKey(f)] = f.Seen
	}

	var out []podFlow

	for _, f := range after {
		if f.Seen > seen[flowKey(f)] {
			out = append(out, f)
		}
	}

	return out
}

// requiredFlowsMissing names the flows any Ichor must be seen using that
// flows lacks.
func requiredFlowsMissing(flows []podFlow) []string {
	has := func(app string, inbound bool, port int, peer func(podFlow) bool) bool {
		return slices.ContainsFunc(flows, func(f podFlow) bool {
			return f.Namespace == icNamespace && f.Labels[netpol.AppLabel] == app && f.Inbound == inbound && f.Port == port && peer(f)
		})
	}

	apiserver := func(f podFlow) bool { return f.PeerControlPlane }
	talos := func(f podFlow) bool { return f.PeerMachine != "" }
	is := func(peer string) func(podFlow) bool {
		return func(f podFlow) bool { return f.Peer == peer }
	}

	var missing []string

	for _, r := range []struct {
		what string
		ok   bool
	}{
		{"ichor-controller → kube-apiserver:6443", has(netpol.ControllerPolicy, false, netpol.KubeAPIServerPort, apiserver)},
		{"ichor-controller → a Talos API :50000", has(netpol.ControllerPolicy, false, netpol.TalosAPIPort, talos)},
		{"kube-apiserver → ichor-controller webhook :9443", has(netpol.ControllerPolicy, true, netpol.ControllerWebhookPort, is(peerKubeAPIServer))},
		{"kubelet → ichor-controller health :8081", has(netpol.ControllerPolicy, true, netpol.ControllerHealthPort, is(peerKubelet))},
		{"ichor-ui → kube-apiserver:6443", has(netpol.UIPolicy, false, netpol.KubeAPIServerPort, apiserver)},
		{"kubelet → ichor-ui :8443", has(netpol.UIPolicy, true, netpol.UIHTTPSPort, is(peerKubelet))},
	} {
		if !r.ok {
			missing = append(missing, r.what)
		}
	}

	return missing
}

// policyFlow is pf as Cilium sees it: an API server's call comes from the
// kube-apiserver entity, a probe from the host; a peer that is a pod is that
// pod, the API server's address is the kube-apiserver entity, another
// address of a Node is the host (the pod's own Node) or remote-node, and
// any other address is outside the cluster.
func policyFlow(pf podFlow) netpol.Flow {
	pod := netpol.Peer{Namespace: pf.Namespace, Labels: pf.Labels}
	f := netpol.Flow{Port: pf.Port, Protocol: netpol.TCP}

	if pf.Inbound {
		f.To = pod

		switch pf.Peer {
		case peerKubeAPIServer:
			f.From = netpol.Entity(netpol.EntityKubeAPIServer)
		case peerKubelet:
			f.From = netpol.Entity(netpol.EntityHost)
		}

		return f
	}

	f.From = pod

	switch {
	case pf.PeerPod != "":
		ns, _, _ := strings.Cut(pf.PeerPod, "/")
		f.To = netpol.Peer{Namespace: ns, Labels: pf.PeerLabels}
	case pf.PeerControlPlane && pf.Port == netpol.KubeAPIServerPort:
		f.To = netpol.Entity(netpol.EntityKubeAPIServer)
	case pf.PeerNode != "" && pf.PeerNode == pf.Node:
		f.To = netpol.Entity(netpol.EntityHost)
	case pf.PeerNode != "":
		f.To = netpol.Entity(netpol.EntityRemoteNode)
	default:
		f.To = netpol.External(pf.Peer)
	}

	return f
}

func describeFlow(f podFlow) string {
	peer := f.Peer
	switch {
	case f.PeerPod != "":
		peer += " (pod " + f.PeerPod + ")"
	case f.PeerNode != "":
		peer += " (Node " + f.PeerNode + ")"
	case f.PeerMachine != "":
		peer += " (machine " + f.PeerMachine + ", not a Node)"
	}

	if f.Inbound {
		return fmt.Sprintf("%s → %s/%s :%d", peer, f.Namespace, f.Pod, f.Port)
	}

	return fmt.Sprintf("%s/%s → %s :%d", f.Namespace, f.Pod, peer, f.Port)
}

func describeFlows(flows []podFlow) string {
	lines := make([]string, 0, len(flows))
	for _, f := range flows {
		lines = append(lines, "  "+describeFlow(f))
	}

	return strings.Join(lines, "\n")
}
