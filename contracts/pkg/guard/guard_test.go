package guard

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

func ptr[T any](v T) *T { return &v }

func cluster(mutate ...func(*ichorv1alpha1.TalosCluster)) *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: "prod-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 3, Schedulable: ptr(true)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "vxlan", KubeProxy: ichorv1alpha1.KubeProxyEnabled},
			Network:           ichorv1alpha1.ClusterNetwork{PodSubnets: []string{"10.244.0.0/16"}, ServiceSubnets: []string{"10.96.0.0/12"}},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func machine(role, state string, mutate ...func(*ichorv1alpha1.TalosMachine)) *ichorv1alpha1.TalosMachine {
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod",
			Role:        role,
			Approval:    ichorv1alpha1.MachineApproval{State: state},
		},
	}
	for _, f := range mutate {
		f(m)
	}
	return m
}

// expect checks that refusals holds exactly one refusal per wanted field, each
// message containing the wanted words; an empty want means "allowed".
// kubeProxyRecorded is a cluster Ichor's Cilium runs on, whose Talos side
// is recorded as running spec.cni.kubeProxy.
func kubeProxyRecorded(c *ichorv1alpha1.TalosCluster) {
	handedOver(c)
	c.Status.CNI.KubeProxy = c.Spec.CNI.KubeProxy
}

func expect(t *testing.T, refusals []Refusal, want map[string][]string) {
	t.Helper()
	if len(want) == 0 {
		if len(refusals) != 0 {
			t.Fatalf("want allowed, got %v", refusals)
		}
		return
	}
	if len(refusals) != len(want) {
		t.Fatalf("want refusals on %v, got %v", want, refusals)
	}
	for _, r := range refusals {
		words, ok := want[r.Field]
		if !ok {
			t.Fatalf("unexpected refusal on %s: %v", r.Field, r)
		}
		if r.Rule == "" || r.WayOut == "" {
			t.Fatalf("refusal on %s lacks a rule or a way out: %+v", r.Field, r)
		}
		for _, w := range words {
			if !strings.Contains(r.Error(), w) {
				t.Errorf("refusal %q does not say %q", r.Error(), w)
			}
		}
	}
}

func TestControlPlaneCount(t *testing.T) {
	for _, n := range []int32{1, 3, 5} {
		if r := CheckControlPlaneCount(n); r != nil {
			t.Errorf("count %d refused: %v", n, r)
		}
	}
	for _, n := range []int32{0, 2, 4, 6} {
		r := CheckControlPlaneCount(n)
		if r == nil || r.Field != "spec.controlPlane.count" || !strings.Contains(r.WayOut, "1, 3 or 5") {
			t.Errorf("count %d: want a refusal naming the field and 1, 3 or 5, got %v", n, r)
		}
	}
}

func TestValidateCluster(t *testing.T) {
	tests := []struct {
		name  string
		old   *ichorv1alpha1.TalosCluster
		new   *ichorv1alpha1.TalosCluster
		facts ClusterFacts
		want  map[string][]string
	}{
		{name: "valid create", new: cluster()},
		{name: "two control planes", new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 2 }),
			want: map[string][]string{"spec.controlPlane.count": {"1, 3 or 5"}}},
		// The standard preset: created tainted, before any machine exists.
		{name: "created unschedulable without workers", new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) })},
		{name: "made unschedulable without workers", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) }),
			want: map[string][]string{"spec.controlPlane.schedulable": {"approve a worker first"}}},
		{name: "made unschedulable with a worker", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) }),
			facts: ClusterFacts{ApprovedWorkers: 1}},
		{name: "unmanaged without adoption", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged}
		}), want: map[string][]string{"spec.cni.preset": {ichorv1alpha1.AdoptedAnnotation}}},
		{name: "unmanaged adopted", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged}
			c.Annotations = map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}
		})},
		{name: "preset changed", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetUnmanaged
			c.Spec.CNI.Tunnel = ""
		}),
			want: map[string][]string{"spec.cni.preset": {"immutable", "new cluster"}, "spec.cni.tunnel": {"immutable"}}},
		{name: "tunnel changed", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Tunnel = "geneve" }),
			want: map[string][]string{"spec.cni.tunnel": {"keep spec.cni.tunnel: vxlan"}}},
		{name: "tunnel set for the first time", old: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Tunnel = "" }), new: cluster()},
		{name: "kube-proxy switch without annotation", old: cluster(kubeProxyRecorded), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced }),
			want: map[string][]string{"spec.cni.kubeProxy": {"asked for explicitly", "ichor cni kube-proxy replaced --cluster prod"}}},
		{name: "kube-proxy switch annotated for the other mode", old: cluster(kubeProxyRecorded), new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced
			c.Annotations = map[string]string{ichorv1alpha1.KubeProxySwitchAnnotation: "true"}
		}),
			want: map[string][]string{"spec.cni.kubeProxy": {`says "true", not "replaced"`}}},
		{name: "kube-proxy switch annotated", old: cluster(kubeProxyRecorded), new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced
			c.Annotations = map[string]string{ichorv1alpha1.KubeProxySwitchAnnotation: ichorv1alpha1.KubeProxyReplaced}
		})},
		{name: "kube-proxy switch while a cni operation runs", old: cluster(kubeProxyRecorded), new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced
			c.Annotations = map[string]string{ichorv1alpha1.KubeProxySwitchAnnotation: ichorv1alpha1.KubeProxyReplaced}
		}), facts: ClusterFacts{UnfinishedCNI: []string{"cni-x"}},
			want: map[string][]string{"spec.cni.kubeProxy": {"operation cni-x"}}},
		{name: "kube-proxy unset to enabled is no switch", old: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.KubeProxy = "" }), new: cluster()},
		{name: "pod subnets changed", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network.PodSubnets = []string{"10.10.0.0/16"} }),
			want: map[string][]string{"spec.network.podSubnets": {"fixed once set"}}},
		{name: "service subnets changed", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network.ServiceSubnets = nil }),
			want: map[string][]string{"spec.network.serviceSubnets": {"fixed once set"}}},
		{name: "talos downgrade", old: cluster(), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.0" }),
			want: map[string][]string{"spec.talosVersion": {"downgrade", "never admitted"}}},
		{name: "talos patch upgrade", old: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.0" }), new: cluster()},
		{name: "kubernetes skips a minor", old: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.35.0" }), new: cluster(),
			want: map[string][]string{"spec.kubernetesVersion": {"one minor"}}},
		{name: "kubernetes one minor up", old: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.36.3" }), new: cluster()},
		{name: "incompatible pair on create", new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.38.0" }),
			want: map[string][]string{"spec.kubernetesVersion": {"incompatible pair", "cannot run on talos", "override"}}},
		// The Kubernetes ↔ Cilium pair (release.CheckCiliumPair): on create
		// against the Cilium Ichor installs, on a change against the one the
		// stored status says runs.
		{name: "kubernetes the pinned cilium does not support, on create", new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" }),
			want: map[string][]string{"spec.kubernetesVersion": {"cilium " + release.DefaultCiliumVersion + " supports kubernetes 1.33", "the Cilium this Ichor installs",
				"choose a Kubernetes version Cilium " + release.DefaultCiliumVersion + " supports", "ichor upgrade kubernetes --list", "override"}}},
		{name: "kubernetes the running cilium does not support", old: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion, c.Status.CNI.CiliumVersion = "1.31.4", "v1.20.2"
		}), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" }),
			want: map[string][]string{"spec.kubernetesVersion": {"cilium v1.20.2 supports kubernetes 1.33 to 1.36, not 1.32.0", "status.cni.ciliumVersion", "override"}}},
		{name: "kubernetes the running older cilium supports", old: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion, c.Status.CNI.CiliumVersion = "1.31.4", "v1.19.3"
		}), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0" })},
		{name: "a cilium this ichor does not know", old: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion, c.Status.CNI.CiliumVersion = "1.36.3", "v1.21.0"
		}), new: cluster(), want: map[string][]string{"spec.kubernetesVersion": {"cilium v1.21.0 is not a version this Ichor knows", "override"}}},
		{name: "the cilium pair is not checked when kubernetes stays", old: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion, c.Status.CNI.CiliumVersion = "1.32.0", "v1.20.2"
		}), new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.0"; c.Spec.Paused = true })},
		{name: "an unmanaged CNI has no cilium pair", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion = "1.32.0"
			c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged}
			c.Annotations = map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}
		})},
		// A cluster stored with a preset Ichor does not manage (CNIUnsupported)
		// can still be annotated for its deletion; setting such a preset cannot.
		{name: "unsupported preset on create", new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: "flannel"} }),
			want: map[string][]string{"spec.cni.preset": {`preset "flannel" is not supported`, "spec.cni.preset: cilium"}}},
		{name: "stored unsupported preset annotated for deletion", old: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: "flannel"} }),
			new: cluster(func(c *ichorv1alpha1.TalosCluster) {
				c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: "flannel"}
				c.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: "true"}
			})},
		{name: "contract newer than talos", new: cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.VersionContract = "v1.15" }),
			want: map[string][]string{"spec.versionContract": {"newer than talos"}}},
		{name: "cilium values setting an owned key", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"hubble":{"enabled":true},"kubeProxyReplacement":true,"clustermesh":{"secretsNamespace":{"name":"x"}}}`)}}
		}), want: map[string][]string{"spec.cni.cilium.values": {`"kubeProxyReplacement"`, `"clustermesh.secretsNamespace.name"`}}},
		// The rules are ciliumvalues.Validate's: a parent of owned keys replaced by null is refused too.
		{name: "cilium values replacing a parent of owned keys", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"cgroup":null,"ipam":{"mode":"cluster-pool"}}`)}}
		}), want: map[string][]string{"spec.cni.cilium.values": {`"cgroup", "ipam.mode"`, "remove these keys"}}},
		{name: "cilium values that are not a map", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`["kubeProxyReplacement"]`)}}
		}), want: map[string][]string{"spec.cni.cilium.values": {"must be a map", "map of Helm values"}}},
		{name: "cilium values of the user's own", new: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"hubble":{"enabled":true}}`)}}
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, ValidateCluster(tt.old, tt.new, tt.facts), tt.want)
		})
	}
	// The pair refusal is the overridable one; a downgrade is not.
	if r := ValidateCluster(nil, cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.31.0" }), ClusterFacts{}); len(r) != 2 || !r[0].Overridable || !r[1].Overridable {
		t.Error("an incompatible pair must be overridable")
	}
	if r := ValidateCluster(cluster(), cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.13.0" }), ClusterFacts{}); r[0].Overridable {
		t.Error("a downgrade must never be overridable")
	}
}

// fields lists requirements as "field=permission".
func fields(rs []Requirement) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Field+"="+r.Permission.String())
	}
	return out
}

func TestClusterRequirements(t *testing.T) {
	if got := fields(ClusterRequirements(nil, cluster())); len(got) != 1 || got[0] != "spec.secretsBundleRef=`update` on `talosclusters/secret-references`" {
		t.Errorf("create: %v", got)
	}
	if got := ClusterRequirements(cluster(), cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true })); len(got) != 0 {
		t.Errorf("an update that names no Secret needs nothing more: %v", got)
	}
	if got := fields(ClusterRequirements(cluster(), cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.SecretsBundleRef.Name = "other" }))); len(got) != 1 {
		t.Errorf("repointing the bundle: %v", got)
	}
	withValues := cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"hubble":{"enabled":true}}`)}}
	})
	if got := fields(ClusterRequirements(cluster(), withValues)); len(got) != 1 || !strings.Contains(got[0], "talosclusters/cilium-values") {
		t.Errorf("values change: %v", got)
	}
	// The same values, serialised differently, are not a change.
	reordered := cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{ "hubble": {"enabled": true} }`)}}
	})
	if got := ClusterRequirements(withValues, reordered); len(got) != 0 {
		t.Errorf("equal values: %v", got)
	}
}

func TestTeardownResetRequirement(t *testing.T) {
	reset := cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Annotations = map[string]string{ichorv1alpha1.TeardownResetMachinesAnnotation: "true"}
	})
	got := ClusterRequirements(cluster(), reset)
	if len(got) != 1 || got[0].Permission.Verb != VerbResetNode || got[0].Permission.Resource != ResourceTalosOperations ||
		!strings.Contains(got[0].Field, ichorv1alpha1.TeardownResetMachinesAnnotation) {
		t.Errorf("setting the teardown reset: %+v", got)
	}
	if got := ClusterRequirements(reset, reset); len(got) != 0 {
		t.Errorf("keeping it needs nothing more: %+v", got)
	}
	if got := ClusterRequirements(reset, cluster()); len(got) != 0 {
		t.Errorf("removing it needs nothing more: %+v", got)
	}
}

func TestDeleteProtection(t *testing.T) {
	expect(t, ValidateClusterDelete(cluster()), map[string][]string{
		"metadata.annotations[ichor.maesh.dev/allow-delete]": {`ichor.maesh.dev/allow-delete: "true"`},
	})
	expect(t, ValidateClusterDelete(cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: "true"}
	})), nil)
	expect(t, ValidateClusterDelete(cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: "yes"}
	})), map[string][]string{"metadata.annotations[ichor.maesh.dev/allow-delete]": nil})
}

func allowDelete(m *ichorv1alpha1.TalosMachine) {
	m.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: "true"}
}

func TestValidateMachineDelete(t *testing.T) {
	deleting := cluster(func(c *ichorv1alpha1.TalosCluster) { c.DeletionTimestamp = ptr(metav1.Now()) })
	unschedulable := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) })
	single := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 1 })
	tests := []struct {
		name  string
		m     *ichorv1alpha1.TalosMachine
		facts MachineFacts
		want  map[string][]string
	}{
		{name: "no annotation", m: machine("worker", "approved"), facts: MachineFacts{Cluster: cluster()},
			want: map[string][]string{"metadata.annotations[ichor.maesh.dev/allow-delete]": {"allow-delete"}}},
		{name: "worker with annotation", m: machine("worker", "approved", allowDelete), facts: MachineFacts{Cluster: cluster(), OtherApprovedControlPlanes: 3}},
		{name: "last control plane with annotation", m: machine("controlplane", "approved", allowDelete), facts: MachineFacts{Cluster: single},
			want: map[string][]string{"spec.role": {"last control plane", "allow-delete annotation does not change that", "delete the TalosCluster"}}},
		{name: "last control plane while the cluster is deleted", m: machine("controlplane", "approved", allowDelete), facts: MachineFacts{Cluster: deleting}},
		{name: "below the count", m: machine("controlplane", "approved", allowDelete), facts: MachineFacts{Cluster: cluster(), OtherApprovedControlPlanes: 2},
			want: map[string][]string{"spec.role": {"fewer than the 3", "add, then remove"}}},
		{name: "replacement done (4 to 3)", m: machine("controlplane", "approved", allowDelete), facts: MachineFacts{Cluster: cluster(), OtherApprovedControlPlanes: 3}},
		{name: "pending control plane", m: machine("controlplane", "pending", allowDelete), facts: MachineFacts{Cluster: single}},
		{name: "last worker of unschedulable control planes", m: machine("worker", "approved", allowDelete), facts: MachineFacts{Cluster: unschedulable, OtherApprovedControlPlanes: 3},
			want: map[string][]string{"spec.role": {"last worker", "override"}}},
		{name: "a worker of unschedulable control planes", m: machine("worker", "approved", allowDelete), facts: MachineFacts{Cluster: unschedulable, OtherApprovedWorkers: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, ValidateMachineDelete(tt.m, tt.facts), tt.want)
		})
	}
}

func TestValidateMachine(t *testing.T) {
	installed := func(m *ichorv1alpha1.TalosMachine) {
		m.Status.Installed = true
		m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "wwid-a"}
		m.Spec.Disks = []ichorv1alpha1.DiskRole{
			{Disk: ichorv1alpha1.DiskSelector{Serial: "eph"}, Role: ichorv1alpha1.DiskRoleEphemeral},
			{Disk: ichorv1alpha1.DiskSelector{Serial: "spare"}, Role: ichorv1alpha1.DiskRoleUnused},
		}
	}
	single := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 1 })
	tests := []struct {
		name     string
		old, new *ichorv1alpha1.TalosMachine
		facts    MachineFacts
		want     map[string][]string
	}{
		{name: "approve the second control plane of count 1 (replacement)", old: machine("controlplane", "pending"), new: machine("controlplane", "approved"),
			facts: MachineFacts{Cluster: single, OtherApprovedControlPlanes: 1}},
		{name: "approve the third control plane of count 1", old: machine("controlplane", "pending"), new: machine("controlplane", "approved"),
			facts: MachineFacts{Cluster: single, OtherApprovedControlPlanes: 2},
			want:  map[string][]string{"spec.approval.state": {"3 approved control planes", "declares 1", "raise spec.controlPlane.count"}}},
		{name: "approve a worker beyond the count", old: machine("worker", "pending"), new: machine("worker", "approved"),
			facts: MachineFacts{Cluster: single, OtherApprovedControlPlanes: 2}},
		{name: "approve without a cluster", old: machine("worker", "pending"), new: machine("worker", "approved"),
			want: map[string][]string{"spec.clusterName": {"does not exist"}}},
		{name: "create approved beyond the count", new: machine("controlplane", "approved"),
			facts: MachineFacts{Cluster: single, OtherApprovedControlPlanes: 2}, want: map[string][]string{"spec.approval.state": nil}},
		{name: "install disk changed after install", old: machine("worker", "approved", installed),
			new: machine("worker", "approved", installed, func(m *ichorv1alpha1.TalosMachine) {
				m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "wwid-b"}
			}), facts: MachineFacts{Cluster: cluster()}, want: map[string][]string{"spec.install": {"remove the machine"}}},
		{name: "ephemeral role moved after install", old: machine("worker", "approved", installed),
			new: machine("worker", "approved", installed, func(m *ichorv1alpha1.TalosMachine) {
				m.Spec.Disks[0].Disk.Serial = "other"
			}), facts: MachineFacts{Cluster: cluster()}, want: map[string][]string{"spec.disks": {"system or ephemeral", "reinstall"}}},
		{name: "storage role added to an unused disk after install", old: machine("worker", "approved", installed),
			new: machine("worker", "approved", installed, func(m *ichorv1alpha1.TalosMachine) {
				m.Spec.Disks[1].Role = ichorv1alpha1.DiskRoleStorage
			}), facts: MachineFacts{Cluster: cluster()}},
		{name: "disk roles changed before install", old: machine("worker", "approved"),
			new: machine("worker", "approved", func(m *ichorv1alpha1.TalosMachine) {
				m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "wwid-b"}
			}), facts: MachineFacts{Cluster: cluster()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, ValidateMachine(tt.old, tt.new, tt.facts), tt.want)
		})
	}
}

func TestMachineRequirements(t *testing.T) {
	if got := MachineRequirements(nil, machine("", "pending")); got != nil {
		t.Errorf("discovery creates pending machines without approve: %v", got)
	}
	got := MachineRequirements(machine("worker", "pending"), machine("worker", "approved"))
	if len(got) != 1 || got[0].Permission.String() != "`approve` on `talosmachines/approval`" {
		t.Fatalf("approval: %v", got)
	}
	if got := MachineRequirements(machine("worker", "pending"), machine("worker", "rejected")); len(got) != 1 {
		t.Errorf("rejection needs approve too: %v", got)
	}
	if got := MachineRequirements(machine("worker", "approved"), machine("worker", "approved", func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Labels = map[string]string{"a": "b"}
	})); got != nil {
		t.Errorf("a label change needs no approve: %v", got)
	}
	r := got[0].Refusal("alice")
	if !strings.Contains(r.Error(), `user "alice"`) || !strings.Contains(r.WayOut, "ichor-admin") {
		t.Errorf("refusal: %v", r)
	}
}

func TestFinalizerRequirements(t *testing.T) {
	if got := FinalizerRequirements("ns", "prod", []string{ichorv1alpha1.MachineFinalizer, "other.io/x"}, []string{ichorv1alpha1.MachineFinalizer}); got != nil {
		t.Errorf("removing a foreign finalizer needs nothing: %v", got)
	}
	got := FinalizerRequirements("ns", "prod", []string{ichorv1alpha1.MachineFinalizer}, nil)
	if len(got) != 1 || got[0].Permission != OverrideOn("ns", "prod") || !strings.Contains(got[0].Action, ichorv1alpha1.MachineFinalizer) {
		t.Fatalf("removing the Ichor finalizer: %v", got)
	}
}

func op(typ string, mutate ...func(*ichorv1alpha1.TalosOperation)) *ichorv1alpha1.TalosOperation {
	o := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "op"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: typ},
	}
	for _, f := range mutate {
		f(o)
	}
	return o
}

func TestOperations(t *testing.T) {
	perms := func(o *ichorv1alpha1.TalosOperation) string {
		rs := OperationRequirements(o)
		s := make([]string, 0, len(rs))
		for _, r := range rs {
			s = append(s, r.Permission.String())
		}
		return strings.Join(s, "+")
	}
	node := func(action string) func(*ichorv1alpha1.TalosOperation) {
		return func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "m1", Action: action}
		}
	}
	for o, want := range map[*ichorv1alpha1.TalosOperation]string{
		op(ichorv1alpha1.OperationShutdown):                                     "`shutdown` on `talosoperations`",
		op(ichorv1alpha1.OperationCARotation):                                   "`rotate-ca` on `talosoperations`",
		op(ichorv1alpha1.OperationKeyRotation):                                  "`rotate-keys` on `talosoperations`",
		op(ichorv1alpha1.OperationEtcdRestore):                                  "`restore-etcd` on `talosoperations`+`override` on `talosclusters`+`update` on `talosoperations/secret-references`",
		op(ichorv1alpha1.OperationNode, node(ichorv1alpha1.NodeActionReset)):    "`reset-node` on `talosoperations`+`override` on `talosclusters`",
		op(ichorv1alpha1.OperationNode, node(ichorv1alpha1.NodeActionShutdown)): "`shutdown-node` on `talosoperations`",
		op(ichorv1alpha1.OperationNode, node(ichorv1alpha1.NodeActionReboot)):   "",
		op(ichorv1alpha1.OperationConfig):                                       "",
	} {
		if got := perms(o); got != want {
			t.Errorf("%s %v: got %q, want %q", o.Spec.Type, o.Spec.Node, got, want)
		}
	}

	facts := OperationFacts{Cluster: cluster()}
	restoreFacts := OperationFacts{Cluster: cluster(), Backup: backup()}
	expect(t, CheckOperation(op(ichorv1alpha1.OperationEtcdRestore, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.EtcdRestore = &ichorv1alpha1.EtcdRestore{BackupName: "b", Snapshot: "s", ConfirmClusterName: "prd"}
	}), restoreFacts), map[string][]string{"spec.etcdRestore.confirmClusterName": {"confirmClusterName: prod"}})
	expect(t, CheckOperation(op(ichorv1alpha1.OperationEtcdRestore, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.EtcdRestore = &ichorv1alpha1.EtcdRestore{BackupName: "b", Snapshot: "s", ConfirmClusterName: "prod"}
	}), restoreFacts), nil)
	expect(t, CheckOperation(op(ichorv1alpha1.OperationTalos, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Talos = &ichorv1alpha1.TalosUpgrade{Version: "v1.14.0"}
	}), facts), map[string][]string{"spec.talos.version": {"downgrade"}})
	upgrading := func(spec string) OperationFacts {
		return OperationFacts{Cluster: cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion, c.Status.KubernetesUpgrade.Version = spec, "1.37.2"
		})}
	}
	expect(t, CheckOperation(op(ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.38.0"}
	}), upgrading("1.38.0")), map[string][]string{"spec.kubernetes.version": {"incompatible pair"}})
	expect(t, CheckOperation(op(ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.5"}
	}), upgrading("1.37.5")), nil)
	expect(t, CheckOperation(op(ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.5"}
	}), facts), map[string][]string{"spec.kubernetes.version": {"spec.kubernetesVersion (v1.37.2)", "ichor upgrade kubernetes 1.37.5"}})
	expect(t, CheckOperation(op(ichorv1alpha1.OperationConfig), OperationFacts{}), map[string][]string{"spec.clusterName": {"does not exist"}})
	unmanaged := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetUnmanaged })
	expect(t, CheckOperation(op(ichorv1alpha1.OperationCNI), OperationFacts{Cluster: unmanaged}), map[string][]string{"spec.type": {"unmanaged CNI"}})

	// A key rotation needs the v1.14 contract's documents, which hold two keys.
	v112 := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.VersionContract = "v1.12" })
	expect(t, CheckOperation(op(ichorv1alpha1.OperationKeyRotation), OperationFacts{Cluster: v112}),
		map[string][]string{"spec.type": {`"v1.12"`, "stay as they are"}})
	expect(t, CheckOperation(op(ichorv1alpha1.OperationKeyRotation), facts), nil)
	// A type this release does not run (one a newer API could add) is
	// refused, naming the type and what does run.
	if r := CheckRunnable(op("defragment")); r == nil || !strings.Contains(r.Rule, `type "defragment"`) || !strings.Contains(r.Rule, `"ichor"`) || r.WayOut == "" {
		t.Errorf("type defragment: %+v", r)
	}
	expect(t, ValidateOperation(op(ichorv1alpha1.OperationConfig), facts), nil)
	// A Talos, a Kubernetes, a Cilium and an Ichor upgrade run, and a CA rotation.
	for _, typ := range []string{ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationKubernetes, ichorv1alpha1.OperationCNI, ichorv1alpha1.OperationKubeProxy,
		ichorv1alpha1.OperationCARotation, ichorv1alpha1.OperationKeyRotation, ichorv1alpha1.OperationIchor} {
		if r := CheckRunnable(op(typ)); r != nil {
			t.Errorf("type %s is refused: %+v", typ, r)
		}
	}
	// A CA rotation of the etcd CA, or of nothing, is refused with a way
	// out; of the aggregator CA it runs, but not on the v1.12 contract.
	no := new(false)
	for name, c := range map[string]*ichorv1alpha1.CARotation{
		"etcd": {Etcd: true}, "nothing": {Talos: no, Kubernetes: no},
	} {
		r := CheckRunnable(op(ichorv1alpha1.OperationCARotation, func(o *ichorv1alpha1.TalosOperation) { o.Spec.CARotation = c }))
		if r == nil || !strings.HasPrefix(r.Field, "spec.caRotation") || r.WayOut == "" {
			t.Errorf("a CA rotation of %s: %+v", name, r)
		}
	}
	aggregator := op(ichorv1alpha1.OperationCARotation, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.CARotation = &ichorv1alpha1.CARotation{Talos: no, Kubernetes: no, Aggregator: true}
	})
	if r := CheckRunnable(aggregator); r != nil {
		t.Errorf("a CA rotation of the aggregator CA alone is refused: %+v", r)
	}
	expect(t, CheckOperation(aggregator, facts), nil)
	expect(t, CheckOperation(aggregator, OperationFacts{Cluster: v112}), map[string][]string{"spec.caRotation.aggregator": {`"v1.12"`, "KubeAggregatorCAConfig"}})
	// A CA rotation covers every machine.
	if r := CheckRunnable(op(ichorv1alpha1.OperationCARotation, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	})); r == nil || r.Field != "spec.machineSelector" {
		t.Errorf("a CA rotation of some machines: %+v", r)
	}
	if r := CheckRunnable(op(ichorv1alpha1.OperationCARotation, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.CARotation = &ichorv1alpha1.CARotation{Kubernetes: new(false)}
	})); r != nil {
		t.Errorf("a CA rotation of the Talos API CA alone is refused: %+v", r)
	}
	// A node operation runs; its machine must exist.
	if r := CheckRunnable(op(ichorv1alpha1.OperationNode, node(ichorv1alpha1.NodeActionReboot))); r != nil {
		t.Errorf("type node is refused: %+v", r)
	}
	expect(t, ValidateOperation(op(ichorv1alpha1.OperationNode, node(ichorv1alpha1.NodeActionReboot)), facts),
		map[string][]string{"spec.node.machineName": {"does not exist", "ichor machine list"}})
}

// Rule: a node operation never shuts down or resets the last control plane
// or a control plane the etcd quorum needs, nor the last worker of
// unschedulable control planes (overridable); a reboot goes.
func TestNodeActionGuards(t *testing.T) {
	c := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = new(false) })
	machine := func(role string) *ichorv1alpha1.TalosMachine {
		return &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Spec: ichorv1alpha1.TalosMachineSpec{ClusterName: c.Name, Role: role,
				Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved}},
		}
	}
	check := func(role, action string, cps, workers int) []Refusal {
		o := op(ichorv1alpha1.OperationNode, func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.ClusterName = c.Name
			o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "m", Action: action}
		})
		return CheckOperation(o, OperationFacts{Cluster: c, Machine: machine(role), OtherApprovedControlPlanes: cps, OtherApprovedWorkers: workers})
	}
	cp, w := ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker
	reset, off, reboot := ichorv1alpha1.NodeActionReset, ichorv1alpha1.NodeActionShutdown, ichorv1alpha1.NodeActionReboot
	expect(t, check(cp, reset, 0, 2), map[string][]string{"spec.node.action": {"last control plane", "`ichor node reboot m`"}})
	expect(t, check(cp, off, 0, 2), map[string][]string{"spec.node.action": {"last control plane"}})
	expect(t, check(cp, reboot, 0, 2), nil)
	expect(t, check(cp, reset, 1, 2), map[string][]string{"spec.node.action": {"fewer than the 2 an etcd quorum needs"}})
	expect(t, check(cp, reset, 2, 2), nil)
	r := check(w, off, 1, 0)
	expect(t, r, map[string][]string{"spec.node.action": {"last worker", "override"}})
	if len(r) != 1 || !r[0].Overridable {
		t.Errorf("the last-worker refusal is not overridable: %+v", r)
	}
	expect(t, check(w, reset, 1, 1), nil)
	expect(t, check(w, reboot, 1, 0), nil)
}

func TestOperationUnchanged(t *testing.T) {
	old := op(ichorv1alpha1.OperationConfig)
	paused := old.DeepCopy()
	paused.Spec.Paused = true
	if r := CheckOperationUnchanged(old, paused); r != nil {
		t.Errorf("pausing refused: %v", r)
	}
	moved := paused.DeepCopy()
	moved.Spec.OrderBy = "rack"
	if r := CheckOperationUnchanged(old, moved); r == nil || !strings.Contains(r.Error(), "immutable except spec.paused") {
		t.Errorf("a change of spec.orderBy: %v", r)
	}
}

func TestInstallationRequirements(t *testing.T) {
	inst := func(version string, drift string) *ichorv1alpha1.IchorInstallation {
		return &ichorv1alpha1.IchorInstallation{
			ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
			Spec: ichorv1alpha1.IchorInstallationSpec{
				Version:  ichorv1alpha1.IchorVersionSpec{Version: version},
				Settings: ichorv1alpha1.IchorSettings{DefaultDriftPolicy: drift},
			},
		}
	}
	subs := func(rs []Requirement) string {
		s := make([]string, 0, len(rs))
		for _, r := range rs {
			s = append(s, r.Permission.Subresource)
		}
		return strings.Join(s, ",")
	}
	for _, tt := range []struct {
		old, new *ichorv1alpha1.IchorInstallation
		want     string
	}{
		{nil, inst("v0.1.0", ""), "version"},
		{nil, inst("v0.1.0", "Warn"), "version,settings"},
		{inst("v0.1.0", ""), inst("v0.2.0", ""), "version"},
		{inst("v0.1.0", ""), inst("v0.1.0", "AutoCorrect"), "settings"},
		{inst("v0.1.0", "Warn"), inst("v0.1.0", "Warn"), ""},
	} {
		if got := subs(InstallationRequirements(tt.old, tt.new)); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestReclaimAndCredentials(t *testing.T) {
	r := &ichorv1alpha1.MachineReclaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}
	if got := ReclaimRequirements(nil, r); len(got) != 1 || got[0].Permission.Verb != VerbReclaim {
		t.Errorf("create: %v", got)
	}
	confirmed := r.DeepCopy()
	confirmed.Spec.ConfirmUUID = "uuid"
	if got := ReclaimRequirements(r, confirmed); len(got) != 1 || got[0].Field != "spec.confirmUUID" {
		t.Errorf("confirm: %v", got)
	}
	if got := ReclaimRequirements(confirmed, confirmed); got != nil {
		t.Errorf("no change: %v", got)
	}
	r.Spec.TTL = &metav1.Duration{Duration: 2 * time.Hour}
	expect(t, ValidateReclaim(r), map[string][]string{"spec.ttl": {"at most 1h0m0s"}})
	r.Spec.TTL = &metav1.Duration{Duration: 30 * time.Minute}
	expect(t, ValidateReclaim(r), nil)

	cr := &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec:       ichorv1alpha1.TalosCredentialRequestSpec{ClusterName: "prod", Purpose: ichorv1alpha1.PurposeRotationCredentials},
	}
	if got := CredentialRequestRequirements(cr); got[0].Permission.String() != "`download` on `talosclusters/credentials`" || got[0].Permission.Name != "prod" {
		t.Errorf("rotation credentials: %v", got)
	}
	cr.Spec.Purpose = ichorv1alpha1.PurposeReader
	if got := CredentialRequestRequirements(cr); got[0].Permission.Verb != VerbGet {
		t.Errorf("reader: %v", got)
	}
	cr.Spec.Purpose = ichorv1alpha1.PurposeTalosconfigReader
	cr.Spec.Duration = &metav1.Duration{Duration: 13 * time.Hour}
	expect(t, ValidateCredentialRequest(cr), map[string][]string{"spec.duration": {"at most 12h0m0s"}})
	cr.Spec.Duration = &metav1.Duration{Duration: time.Hour}
	expect(t, ValidateCredentialRequest(cr), nil)
}

func TestBackupRequirements(t *testing.T) {
	b := &ichorv1alpha1.TalosEtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}
	b.Spec.S3.CredentialsRef.Name = "s3"
	b.Spec.EncryptionKeyRef.Name = "age"
	if got := BackupRequirements(nil, b); len(got) != 2 {
		t.Errorf("create names two Secrets: %v", got)
	}
	c := b.DeepCopy()
	c.Spec.Schedule = "0 * * * *"
	if got := BackupRequirements(b, c); got != nil {
		t.Errorf("schedule change: %v", got)
	}
	c.Spec.S3.CredentialsRef.Name = "other"
	if got := BackupRequirements(b, c); len(got) != 1 || got[0].Permission.String() != "`update` on `talosetcdbackups/secret-references`" {
		t.Errorf("repoint: %v", got)
	}
}

func TestCheckAutoPatch(t *testing.T) {
	on := func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.AutoPatch.Enabled = true
		c.Spec.TalosVersion = "v1.14.0"
		c.Spec.KubernetesVersion = "1.37.1"
	}
	old := cluster(on)
	expect(t, CheckAutoPatch(old, cluster(on, func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.14.1"
		c.Spec.KubernetesVersion = "1.37.2"
	})), nil)
	expect(t, CheckAutoPatch(old, cluster(on, func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.38.0" })),
		map[string][]string{"spec.kubernetesVersion": {"not a newer patch"}})
	expect(t, CheckAutoPatch(old, cluster(on, func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.13.9" })),
		map[string][]string{"spec.talosVersion": {"not a newer patch"}})
	expect(t, CheckAutoPatch(old, cluster(on, func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true })),
		map[string][]string{"spec": {"other than talosVersion and kubernetesVersion"}})
	expect(t, CheckAutoPatch(cluster(), cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.2" })),
		map[string][]string{"spec.autoPatch.enabled": {"off"}})
	if AutoPatchUsername("ichor-system") != "system:serviceaccount:ichor-system:ichor-auto-patch" {
		t.Error(AutoPatchUsername("ichor-system"))
	}
}

func TestCheckReclaimCredential(t *testing.T) {
	r := &ichorv1alpha1.MachineReclaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ichor-system", Name: "r"}}
	r.Spec.CredentialsRef.Name = "foreign"
	expect(t, CheckReclaimCredential(r, nil), map[string][]string{"spec.credentialsRef": {"does not exist", "create the Secret"}})
	expect(t, CheckReclaimCredential(r, ptr("Opaque")), map[string][]string{"spec.credentialsRef": {`type "Opaque"`, ichorv1alpha1.ForeignTalosconfigSecretType}})
	expect(t, CheckReclaimCredential(r, ptr(ichorv1alpha1.ForeignTalosconfigSecretType)), nil)
}

func TestCheckApprovalRecord(t *testing.T) {
	now := metav1.Now()
	decided := func(by string, at *metav1.Time) func(*ichorv1alpha1.TalosMachine) {
		return func(m *ichorv1alpha1.TalosMachine) {
			m.Spec.Approval.DecidedBy = by
			m.Spec.Approval.DecidedAt = at
		}
	}
	pending := machine("worker", "pending")
	if r := CheckApprovalRecord(pending, machine("worker", "approved", decided("otto", &now)), "otto"); r != nil {
		t.Errorf("a recorded approval: %v", r)
	}
	r := CheckApprovalRecord(pending, machine("worker", "approved", decided("ada", &now)), "otto")
	if r == nil || r.Field != "spec.approval.decidedBy" || !strings.Contains(r.WayOut, `decidedBy: "otto"`) {
		t.Errorf("someone else's name: %v", r)
	}
	if r := CheckApprovalRecord(pending, machine("worker", "rejected", decided("otto", nil)), "otto"); r == nil || !strings.Contains(r.Rule, "decidedAt is unset") {
		t.Errorf("no time: %v", r)
	}
	if r := CheckApprovalRecord(nil, machine("worker", "approved"), "adopt"); r == nil {
		t.Error("a machine created approved records the decision too")
	}
	approved := machine("worker", "approved", decided("ada", &now))
	if r := CheckApprovalRecord(approved, approved.DeepCopy(), "otto"); r != nil {
		t.Errorf("an unchanged approval is not re-checked: %v", r)
	}
	if r := CheckApprovalRecord(nil, pending, "discovery"); r != nil {
		t.Errorf("a pending machine needs no record: %v", r)
	}
}

func TestScanRequest(t *testing.T) {
	withSubnet := func(c *ichorv1alpha1.TalosCluster) { c.Spec.Discovery.Subnets = []string{"10.0.0.0/24"} }
	for _, tc := range []struct {
		name  string
		c     *ichorv1alpha1.TalosCluster
		field string
		way   string
	}{
		{"a subnet to scan", cluster(withSubnet), "", ""},
		{"an address to probe", cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.Discovery.Addresses = []string{"10.0.0.5"} }), "", ""},
		{"nothing to scan", cluster(), "spec.discovery", "ichor cluster discovery add"},
		{"paused", cluster(withSubnet, func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }), "spec.paused", "ichor cluster resume prod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := ScanRequest(tc.c)
			if tc.field == "" {
				if len(rf) != 0 {
					t.Fatalf("refused: %v", rf)
				}
				return
			}
			if len(rf) != 1 || rf[0].Field != tc.field || !strings.Contains(rf[0].WayOut, tc.way) {
				t.Fatalf("refusals %v, want one on %s naming %q", rf, tc.field, tc.way)
			}
		})
	}
}

func TestPauseReason(t *testing.T) {
	if rf := PauseReason(strings.Repeat("é", MaxPauseReason)); len(rf) != 0 {
		t.Fatalf("a reason of %d characters refused: %v", MaxPauseReason, rf)
	}
	long := strings.Repeat("x", MaxPauseReason+1)
	if rf := PauseReason(long); len(rf) != 1 || !strings.Contains(rf[0].Rule, "at most 512") {
		t.Fatalf("a reason too long: %v", rf)
	}
	// Admission refuses a new or changed reason that is too long, and keeps
	// one written before the rule.
	withReason := func(r string) func(*ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) {
			c.Annotations = map[string]string{ichorv1alpha1.PausedReasonAnnotation: r}
		}
	}
	if rf := ValidateCluster(cluster(), cluster(withReason(long)), ClusterFacts{}); len(rf) != 1 || rf[0].Field != "metadata.annotations[ichor.maesh.dev/paused-reason]" {
		t.Fatalf("a long reason admitted: %v", rf)
	}
	if rf := ValidateCluster(cluster(withReason(long)), cluster(withReason(long), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }), ClusterFacts{}); len(rf) != 0 {
		t.Fatalf("an unchanged reason refused: %v", rf)
	}
	if rf := ValidateCluster(cluster(), cluster(withReason("ticket 42")), ClusterFacts{}); len(rf) != 0 {
		t.Fatalf("a short reason refused: %v", rf)
	}
}

func TestCheckTalosUpgrade(t *testing.T) {
	c := cluster()
	running := ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "talos-1"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: c.Name, Type: ichorv1alpha1.OperationTalos},
		Status:     ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationRunning},
	}
	done := *running.DeepCopy()
	done.Status.Phase = ichorv1alpha1.OperationSucceeded

	expect(t, CheckTalosUpgrade(c, []ichorv1alpha1.TalosOperation{done}, "v1.14.2"), nil)
	expect(t, CheckTalosUpgrade(c, nil, c.Spec.TalosVersion), map[string][]string{"spec.talosVersion": {"already at Talos"}})
	expect(t, CheckTalosUpgrade(c, nil, "v1.14.0"), map[string][]string{"spec.talosVersion": {"downgrade"}})
	if rs := CheckTalosUpgrade(c, nil, "v1.99.0"); len(rs) != 2 || !strings.Contains(rs[0].Error(), "upgrade path refused") ||
		!strings.Contains(rs[1].Error(), "incompatible pair") || !rs[1].Overridable {
		t.Errorf("an unknown minor: %v", rs)
	}
	expect(t, CheckTalosUpgrade(c, []ichorv1alpha1.TalosOperation{running}, "v1.14.2"),
		map[string][]string{"spec.talosVersion": {"talos-1", "has not finished"}})
}

func TestValidateSettings(t *testing.T) {
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }

	if r := ValidateSettings(ichorv1alpha1.IchorSettings{}); len(r) != 0 {
		t.Fatalf("empty settings refused: %v", r)
	}

	if r := ValidateSettings(ichorv1alpha1.IchorSettings{IDTokenLifetime: d(time.Hour), RefreshTokenLifetime: d(10 * time.Minute)}); len(r) != 0 {
		t.Fatalf("settings at the bounds refused: %v", r)
	}

	r := ValidateSettings(ichorv1alpha1.IchorSettings{IDTokenLifetime: d(2 * time.Hour), RefreshTokenLifetime: d(0)})
	if len(r) != 2 || r[0].Field != "spec.settings.idTokenLifetime" || !strings.Contains(r[0].Error(), "lasts 1m0s to 1h0m0s, not 2h0m0s") ||
		r[1].Field != "spec.settings.refreshTokenLifetime" || !strings.Contains(r[1].Error(), "remove the field for the default") {
		t.Fatalf("out-of-range settings: %v", r)
	}
}
