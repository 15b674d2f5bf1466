package kubeupgrade

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func cluster(running string) *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	c.Spec.KubernetesVersion = "1.37.2"
	c.Status.KubernetesUpgrade.Version = running

	return c
}

func op(name, target, phase, step string, machines ...ichorv1alpha1.MachineProgress) ichorv1alpha1.TalosOperation {
	return ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(len(name)), 0))},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: "c", Type: ichorv1alpha1.OperationKubernetes,
			Kubernetes: &ichorv1alpha1.KubernetesUpgrade{Version: target},
		},
		Status: ichorv1alpha1.TalosOperationStatus{Phase: phase, Step: step, Machines: machines},
	}
}

// entry is cp-1's entry in a stage.
func entry(stage, phase string) ichorv1alpha1.MachineProgress {
	return ichorv1alpha1.MachineProgress{Name: "cp-1", Stage: stage, Phase: phase}
}

// Rule: a machine's components keep the running version until the operation
// reaches them; the intermediate renders never need a write to spec.
func TestPins(t *testing.T) {
	m := &ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp-1"}}
	all := Versions{ControlPlane: "1.36.3", Proxy: "1.36.3", Kubelet: "1.36.3"}
	running := ichorv1alpha1.OperationRunning

	tests := []struct {
		name string
		c    *ichorv1alpha1.TalosCluster
		ops  []ichorv1alpha1.TalosOperation
		want Versions
	}{
		{"no running version recorded: the spec", cluster(""), nil, Versions{}},
		{"spec at the running version", cluster("v1.37.2"), nil, Versions{}},
		{"spec moved, no operation yet: all pinned", cluster("1.36.3"), nil, all},
		{"an operation for another target does not govern", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.1", ichorv1alpha1.OperationSucceeded, "")}, all},
		{"pre-checks: all pinned", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "v1.37.2", running, ichorv1alpha1.KubernetesStagePreCheck)}, all},
		{"control-plane stage, this machine pending", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageControlPlane,
				entry(ichorv1alpha1.KubernetesStageControlPlane, ichorv1alpha1.MachinePending))}, all},
		{"control-plane stage, this machine started", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageControlPlane,
				entry(ichorv1alpha1.KubernetesStageControlPlane, ichorv1alpha1.MachineInProgress))},
			Versions{Proxy: "1.36.3", Kubelet: "1.36.3"}},
		{"a pre-pull entry is not the control-plane stage", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageControlPlane,
				entry(ichorv1alpha1.KubernetesStagePrePull, ichorv1alpha1.MachineDone))}, all},
		{"manifests: control plane and proxy moved", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageManifests)},
			Versions{Kubelet: "1.36.3"}},
		{"kubelet stage, this machine pending", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageKubelet,
				entry(ichorv1alpha1.KubernetesStageKubelet, ichorv1alpha1.MachinePending))},
			Versions{Kubelet: "1.36.3"}},
		{"kubelet stage, this machine done", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageKubelet,
				entry(ichorv1alpha1.KubernetesStageKubelet, ichorv1alpha1.MachineDone))}, Versions{}},
		{"kubelet stage, a machine the operation does not list", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", running, ichorv1alpha1.KubernetesStageKubelet)},
			Versions{Kubelet: "1.36.3"}},
		{"succeeded: nothing pinned", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", ichorv1alpha1.OperationSucceeded, "")}, Versions{}},
		{"failed (refused): all pinned", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{op("k", "1.37.2", ichorv1alpha1.OperationFailed, "")}, all},
		{"the newest operation for the target governs", cluster("1.36.3"),
			[]ichorv1alpha1.TalosOperation{
				op("k", "1.37.2", ichorv1alpha1.OperationSucceeded, ""),
				op("k-2", "1.37.2", running, ichorv1alpha1.KubernetesStagePrePull),
			}, all},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Pins(tt.c, m, tt.ops); got != tt.want {
				t.Fatalf("Pins = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRetag(t *testing.T) {
	for _, tt := range []struct{ image, from, to, want string }{
		{"registry.k8s.io/kube-apiserver:v1.37.2", "1.37.2", "1.36.3", "registry.k8s.io/kube-apiserver:v1.36.3"},
		{"ghcr.io/siderolabs/kubelet:v1.37.2-fat", "v1.37.2", "1.36.3", "ghcr.io/siderolabs/kubelet:v1.36.3-fat"},
		{"mirror:5000/kube-proxy:v1.37.2", "1.37.2", "1.36.3", "mirror:5000/kube-proxy:v1.36.3"},
		{"registry.k8s.io/kube-apiserver:v1.37.20", "1.37.2", "1.36.3", "registry.k8s.io/kube-apiserver:v1.37.20"},
		{"registry.k8s.io/kube-apiserver:v1.35.0", "1.37.2", "1.36.3", "registry.k8s.io/kube-apiserver:v1.35.0"},
		{"registry.k8s.io/kube-apiserver@sha256:abcd", "1.37.2", "1.36.3", "registry.k8s.io/kube-apiserver@sha256:abcd"},
	} {
		if got := Retag(tt.image, tt.from, tt.to); got != tt.want {
			t.Errorf("Retag(%s, %s, %s) = %s, want %s", tt.image, tt.from, tt.to, got, tt.want)
		}
	}

	if v := ImageVersion("ghcr.io/siderolabs/kubelet:v1.36.3-fat"); v != "1.36.3" {
		t.Errorf("ImageVersion = %q", v)
	}
}

const metrics = `# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="networking.k8s.io",removed_release="1.37",resource="servicecidrs",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="storage.k8s.io",removed_release="1.37",resource="volumeattributesclasses",subresource="status",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="resource.k8s.io",removed_release="1.38",resource="deviceclasses",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="example.com",removed_release="",resource="widgets",subresource="",version="v1alpha1"} 1
apiserver_request_total{code="200",group="networking.k8s.io",resource="servicecidrs",version="v1beta1"} 3
`

// Rule: an API in use counts as removed when its removed_release is at or
// below the target's minor; later removals and CRDs without one do not.
func TestRemovedAPIs(t *testing.T) {
	got, err := RemovedAPIs([]byte(metrics), "1.37.2")
	if err != nil {
		t.Fatal(err)
	}

	want := []ichorv1alpha1.RemovedAPI{
		{Group: "networking.k8s.io", Version: "v1beta1", Resource: "servicecidrs", RemovedRelease: "1.37"},
		{Group: "storage.k8s.io", Version: "v1beta1", Resource: "volumeattributesclasses", Subresource: "status", RemovedRelease: "1.37"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RemovedAPIs = %+v\nwant %+v", got, want)
	}

	if got, _ := RemovedAPIs([]byte(metrics), "1.36.9"); len(got) != 0 {
		t.Fatalf("nothing is removed below 1.37: %+v", got)
	}

	if _, err := RemovedAPIs([]byte(`apiserver_requested_deprecated_apis{group="x" 1`), "1.37.2"); err == nil {
		t.Fatal("a malformed sample must be an error")
	}

	all := MergeRemovedAPIs(nil, "cp-1", got)
	all = MergeRemovedAPIs(all, "cp-2", got[:1])

	if !reflect.DeepEqual(all[0].ControlPlanes, []string{"cp-1", "cp-2"}) || !reflect.DeepEqual(all[1].ControlPlanes, []string{"cp-1"}) {
		t.Fatalf("merged %+v", all)
	}

	if d := DescribeRemovedAPI(all[1]); !strings.Contains(d, "volumeattributesclasses/status.v1beta1.storage.k8s.io") || !strings.Contains(d, "1.37") {
		t.Fatalf("described %q", d)
	}
}
