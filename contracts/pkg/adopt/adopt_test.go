package adopt_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
)

// ciliumManifest is the shape of `cilium install --dry-run` / `helm template`
// output that matters to adoption: cilium-config with its IPAM mode and the
// cilium DaemonSet.
func ciliumManifest(ipam string) string {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cilium-config\n  namespace: kube-system\ndata:\n  tunnel-protocol: vxlan\n"
	if ipam != "" {
		cm += "  ipam: " + ipam + "\n"
	}

	return "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: cilium\n  namespace: kube-system\n---\n" + cm +
		"---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: cilium\n  namespace: kube-system\nspec:\n  selector:\n    matchLabels:\n      k8s-app: cilium\n"
}

// talosctlCluster generates the configurations `talosctl gen config` would:
// machinery's secrets and generate, with the CNI patch a person applies.
type talosctlCluster struct {
	bundle *secrets.Bundle
	cp, w  []byte
}

const (
	cniFlannel = "flannel"
	cniNone    = "none"
)

//nolint:staticcheck // the v1alpha1 inline manifests are what generated configs carry
func gen(t *testing.T, cni string, inline ...v1alpha1.ClusterInlineManifest) talosctlCluster {
	t.Helper()

	b, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput("theirs", "https://10.5.0.2:6443", "1.37.2", generate.WithSecretsBundle(b), generate.WithInstallDisk("/dev/nvme0n1"))
	if err != nil {
		t.Fatal(err)
	}

	out := talosctlCluster{bundle: b}

	for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		cfg, err := in.Config(typ)
		if err != nil {
			t.Fatal(err)
		}

		if cni == cniNone {
			p, err := configpatcher.LoadPatch([]byte("apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n"))
			if err != nil {
				t.Fatal(err)
			}

			o, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
			if err != nil {
				t.Fatal(err)
			}

			if cfg, err = o.Config(); err != nil {
				t.Fatal(err)
			}
		}

		if typ == machine.TypeControlPlane && len(inline) > 0 {
			cfg.RawV1Alpha1().ClusterConfig.ClusterInlineManifests = inline
		}

		b, err := cfg.EncodeBytes()
		if err != nil {
			t.Fatal(err)
		}

		if typ == machine.TypeControlPlane {
			out.cp = b
		} else {
			out.w = b
		}
	}

	return out
}

func (c talosctlCluster) machines() []adopt.Machine {
	return []adopt.Machine{
		{Address: "10.5.0.2", Hostname: "cp-1", UUID: "u-1", TalosVersion: "v1.14.1", Config: c.cp},
		{Address: "10.5.0.3", Hostname: "w-1", UUID: "u-2", TalosVersion: "v1.14.1", Config: c.w},
	}
}

func classes(m adopt.MachinePlan, c adopt.Class) []string {
	var out []string

	for _, d := range m.Drift {
		if d.Class == c {
			out = append(out, d.Path)
		}
	}

	return out
}

//nolint:staticcheck // the v1alpha1 inline manifests are what generated configs carry
func ciliumEntry(ipam string) v1alpha1.ClusterInlineManifest {
	return v1alpha1.ClusterInlineManifest{InlineManifestName: "cilium", InlineManifestContents: ciliumManifest(ipam)}
}

// TestPlanInlineCilium: a talosctl cluster with Talos's CNI off and Cilium in
// an inline manifest is adoptable as the managed cilium preset under the
// v1.14 contract; the only drift is Ichor-owned (the Cilium entry) or
// representable, and no machine is blocked.
func TestPlanInlineCilium(t *testing.T) {
	c := gen(t, cniNone, ciliumEntry("kubernetes"))

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle})
	if err != nil {
		t.Fatal(err)
	}

	if p.Refused() {
		t.Fatalf("refused: %v", p.Refusals)
	}

	if p.Cluster.VersionContract != "v1.14" || p.Cluster.ContractSource != "probe" || len(p.Cluster.Probe) != 3 {
		t.Errorf("contract %s (%s), probe %+v; want v1.14 chosen by a probe of v1.14, v1.13, v1.12", p.Cluster.VersionContract, p.Cluster.ContractSource, p.Cluster.Probe)
	}

	if p.Cluster.Probe[0].Unrepresentable != 0 || p.Cluster.Probe[1].Unrepresentable == 0 {
		t.Errorf("probe scores %+v: want none unrepresentable under v1.14, some under v1.13", p.Cluster.Probe)
	}

	if p.Cluster.CNIPreset != ichorv1alpha1.CNIPresetCilium || len(p.Cluster.CNIs) != 1 || p.Cluster.CNIs[0].InlineManifest != "cilium" || p.Cluster.CNIs[0].IPAM != "kubernetes" {
		t.Errorf("CNI: preset %q, found %+v", p.Cluster.CNIPreset, p.Cluster.CNIs)
	}

	if p.Cluster.Name != "theirs" || p.Cluster.KubernetesVersion != "1.37.2" || !p.Cluster.KubeProxy || p.Cluster.KubePrismPort != 7445 || p.Cluster.TalosCNI != adopt.TalosCNINone {
		t.Errorf("cluster facts: %+v", p.Cluster)
	}

	cp := p.Machines[0]
	if cp.Blocked || cp.Role != ichorv1alpha1.RoleControlPlane || cp.InstallDisk != "/dev/nvme0n1" {
		t.Errorf("control plane: blocked %t, role %s, install disk %q", cp.Blocked, cp.Role, cp.InstallDisk)
	}

	if b := classes(cp, adopt.ClassIchorOwned); !contains(b, "v1alpha1:cluster.inlineManifests") {
		t.Errorf("class B of the control plane %v: want the Cilium inline manifest", b)
	}

	if p.Machines[1].Blocked {
		t.Errorf("worker blocked: %v", classes(p.Machines[1], adopt.ClassBlocking))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}

	return false
}

// TestPlanRefusals: what adoption never takes is refused before any render.
func TestPlanRefusals(t *testing.T) {
	for _, tc := range []struct {
		name      string
		c         talosctlCluster
		versions  [2]string
		unmanaged bool
		want      []string
	}{
		{name: "older than v1.12", c: gen(t, cniNone), versions: [2]string{"v1.11.5", "v1.11.5"}, want: []string{"10.5.0.2 runs Talos v1.11.5", "older than v1.12", "upgrade Talos first"}},
		{name: "mixed", c: gen(t, cniNone), versions: [2]string{"v1.14.1", "v1.13.4"}, want: []string{"different Talos versions", "v1.13.4 on 10.5.0.3", "v1.14.1 on 10.5.0.2", "upgrade Talos first"}},
		{name: "unknown", c: gen(t, cniNone), versions: [2]string{"v1.15.0", "v1.15.0"}, want: []string{"does not know", "v1.15.0", "Ichor release"}},
		{name: "not a version", c: gen(t, cniNone), versions: [2]string{"banana", "banana"}, want: []string{"does not know", `"banana"`}},
		{name: "two CNIs", c: gen(t, cniFlannel, ciliumEntry("kubernetes")), want: []string{"two CNIs", "flannel (Talos's own", "cilium (inline manifest cilium"}},
		{name: "two CNIs even unmanaged", c: gen(t, cniFlannel, ciliumEntry("kubernetes")), unmanaged: true, want: []string{"two CNIs"}},
		{name: "cluster-pool", c: gen(t, cniNone, ciliumEntry("cluster-pool")), want: []string{`IPAM "cluster-pool"`, "kubernetes IPAM"}},
		{name: "cilium-config without ipam is cluster-pool", c: gen(t, cniNone, ciliumEntry("")), want: []string{`IPAM "cluster-pool"`}},
		{name: "flannel without --cni-unmanaged", c: gen(t, cniFlannel), want: []string{"runs flannel", "--cni-unmanaged"}},
		{name: "no CNI with --cni-unmanaged", c: gen(t, cniNone), unmanaged: true, want: []string{"runs none", "without --cni-unmanaged"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := tc.c.machines()
			if tc.versions[0] != "" {
				ms[0].TalosVersion, ms[1].TalosVersion = tc.versions[0], tc.versions[1]
			}

			p, err := adopt.Build(ms, adopt.Options{Bundle: tc.c.bundle, CNIUnmanaged: tc.unmanaged})
			if err != nil {
				t.Fatal(err)
			}

			if !p.Refused() {
				t.Fatal("not refused")
			}

			msg := fmt.Sprint(p.Refusals)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the refusal does not say %q: %s", w, msg)
				}
			}

			if p.Cluster.VersionContract != "" || p.Machines[0].Drift != nil {
				t.Errorf("a refused plan rendered: contract %q, drift %v", p.Cluster.VersionContract, p.Machines[0].Drift)
			}
		})
	}
}

// TestPlanFlannelUnmanaged: with --cni-unmanaged Talos's flannel stays, the
// preset is unmanaged and nothing is Ichor-owned about the CNI.
func TestPlanFlannelUnmanaged(t *testing.T) {
	c := gen(t, cniFlannel)

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle, CNIUnmanaged: true})
	if err != nil {
		t.Fatal(err)
	}

	if p.Refused() || p.Cluster.CNIPreset != ichorv1alpha1.CNIPresetUnmanaged {
		t.Fatalf("preset %q, refusals %v", p.Cluster.CNIPreset, p.Refusals)
	}

	for _, m := range p.Machines {
		if m.Blocked {
			t.Errorf("%s blocked: %v", m.Address, classes(m, adopt.ClassBlocking))
		}

		for _, d := range m.Drift {
			if strings.HasPrefix(d.Path, "KubeFlannelCNIConfig") {
				t.Errorf("%s: Talos's flannel is drift under the unmanaged preset: %+v", m.Address, d)
			}
		}
	}
}

// TestPlanFlannelRemoval: on a cluster without a CNI adoption installs
// Cilium; Talos's flannel, when on, is class B (removed).
func TestPlanWrongBundle(t *testing.T) {
	c := gen(t, cniNone, ciliumEntry("kubernetes"))
	other := gen(t, cniNone)

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: other.bundle})
	if err != nil {
		t.Fatal(err)
	}

	for _, m := range p.Machines {
		if !m.Blocked || !strings.Contains(m.Hint, "secrets bundle") {
			t.Errorf("%s with another cluster's bundle: blocked %t, hint %q", m.Address, m.Blocked, m.Hint)
		}

		secret := 0

		for _, d := range m.Drift {
			if d.Class == adopt.ClassBlocking && strings.Contains(d.Why, "secret material") {
				secret++
			}
		}

		if secret == 0 {
			t.Errorf("%s: no secret-field drift: %+v", m.Address, m.Drift)
		}
	}
}

// TestPlanOtherInlineManifest: an inline manifest other than Cilium's blocks
// the control plane (class C); the worker, which carries none, is not blocked.
func TestPlanOtherInlineManifest(t *testing.T) {
	c := gen(t, cniNone, ciliumEntry("kubernetes"), v1alpha1.ClusterInlineManifest{ //nolint:staticcheck // see gen
		InlineManifestName: "extra", InlineManifestContents: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: extra\n",
	})

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle})
	if err != nil {
		t.Fatal(err)
	}

	if cp := p.Machines[0]; !cp.Blocked || !contains(classes(cp, adopt.ClassBlocking), "v1alpha1:cluster.inlineManifests") {
		t.Errorf("control plane: blocked %t, class C %v", cp.Blocked, classes(cp, adopt.ClassBlocking))
	}

	if p.Machines[1].Blocked {
		t.Errorf("worker blocked: %v", classes(p.Machines[1], adopt.ClassBlocking))
	}

	if len(p.Cluster.InlineManifests) != 2 || p.Cluster.InlineManifests[1].Objects[0] != "Namespace extra" {
		t.Errorf("inline manifests: %+v", p.Cluster.InlineManifests)
	}
}

// TestPlanVersionContractFlag: --version-contract renders with that contract
// only; one outside v1.12..running is an error.
func TestPlanVersionContractFlag(t *testing.T) {
	c := gen(t, cniNone)

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle, VersionContract: "v1.13"})
	if err != nil {
		t.Fatal(err)
	}

	if p.Cluster.VersionContract != "v1.13" || p.Cluster.ContractSource != "flag" || len(p.Cluster.Probe) != 1 {
		t.Errorf("contract %s (%s) %+v", p.Cluster.VersionContract, p.Cluster.ContractSource, p.Cluster.Probe)
	}

	if _, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle, VersionContract: "v1.11"}); err == nil || !strings.Contains(err.Error(), "v1.14, v1.13, v1.12") {
		t.Errorf("--version-contract v1.11: %v", err)
	}
}

func TestContractCandidates(t *testing.T) {
	got, err := adopt.ContractCandidates("v1.13.2")
	if err != nil || strings.Join(got, ",") != "v1.13,v1.12" {
		t.Errorf("v1.13.2: %v %v", got, err)
	}
}

func TestCheckMembers(t *testing.T) {
	if r := adopt.CheckMembers([]string{"cp-1", "CP-2.example.com"}, []string{"cp-1", "cp-2"}); r != nil {
		t.Errorf("every member given: %v", r)
	}

	r := adopt.CheckMembers([]string{"cp-1"}, []string{"cp-3", "cp-1", "cp-2"})
	if len(r) != 1 || !strings.Contains(r[0].Rule, "cp-2, cp-3") || !strings.Contains(r[0].WayOut, "--node") {
		t.Errorf("two members left out: %v", r)
	}
}

// TestPlanMemberLeftOut: a control plane etcd lists but the plan was not
// given is refused; without the member list the plan warns.
func TestPlanMemberLeftOut(t *testing.T) {
	c := gen(t, cniNone, ciliumEntry("kubernetes"))

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle, EtcdMembers: []string{"cp-1", "cp-2"}})
	if err != nil {
		t.Fatal(err)
	}

	if !p.Refused() || !strings.Contains(fmt.Sprint(p.Refusals), "cp-2") {
		t.Errorf("refusals %v", p.Refusals)
	}

	p, err = adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle})
	if err != nil {
		t.Fatal(err)
	}

	if p.Refused() || !strings.Contains(fmt.Sprint(p.Warnings), "etcd members were not read") {
		t.Errorf("without the member list: refusals %v, warnings %v", p.Refusals, p.Warnings)
	}
}
