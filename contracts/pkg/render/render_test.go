package render_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

func values(t *testing.T, r *render.Result) render.Values {
	t.Helper()

	// Through machinery's configloader: the bytes are a loadable configuration.
	v, err := render.ConfigValues(r.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return v
}

func get(v render.Values, s string) (any, bool) {
	for p, x := range v {
		if p.String() == s {
			return x, true
		}
	}

	return nil, false
}

func hasKind(v render.Values, kind string) bool {
	for p := range v {
		if p.Kind == kind {
			return true
		}
	}

	return false
}

func sysctl(v string) mirror.PatchDocument {
	return mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"net.core.somaxconn": v}}}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()

	// Many map keys everywhere: Go randomises map order, the bytes must not vary.
	many := map[string]string{}
	for i := range 32 {
		many[fmt.Sprintf("net.ipv4.conf.k%02d", i)] = fmt.Sprint(i)
	}

	in := input(t)
	in.Machine.Spec.Labels = map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}
	in.Cluster.Spec.Registry.Mirrors = []ichorv1alpha1.RegistryMirror{
		{Registry: "docker.io", Endpoints: []string{"https://m1"}}, {Registry: "ghcr.io", Endpoints: []string{"https://m2"}},
	}
	in.Patches = []ichorv1alpha1.TalosConfigPatch{
		patch("b", ichorv1alpha1.LayerCluster, 0, ichorv1alpha1.PatchTarget{}, sysctl("1")),
		patch("a", ichorv1alpha1.LayerCluster, 0, ichorv1alpha1.PatchTarget{}, sysctl("2"),
			mirror.PatchDocument{SysfsConfig: &mirror.SysfsConfig{Params: many}}),
	}

	a := renderOK(t, in)

	for range 5 {
		if again := renderOK(t, in); !bytes.Equal(again.Bytes, a.Bytes) {
			t.Fatal("the same input rendered different bytes")
		}
	}

	// Reversed input order, fresh objects: the same bytes.
	in2 := input(t)
	in2.Machine.Spec.Labels = in.Machine.Spec.Labels
	in2.Cluster.Spec.Registry = in.Cluster.Spec.Registry
	in2.Patches = []ichorv1alpha1.TalosConfigPatch{in.Patches[1], in.Patches[0]}
	b := renderOK(t, in2)

	if !bytes.Equal(a.Bytes, b.Bytes) || a.Hash != b.Hash {
		t.Fatal("two renders of the same inputs differ")
	}

	sum := sha256.Sum256(a.Bytes)
	if a.Hash != "sha256:"+hex.EncodeToString(sum[:]) || render.Hash(a.Bytes) != a.Hash {
		t.Fatalf("hash %s is not the SHA-256 of the bytes", a.Hash)
	}

	// A different input, a different hash.
	in2.Machine.Spec.Hostname = "other"

	c := renderOK(t, in2)
	if c.Hash == a.Hash {
		t.Fatal("a changed hostname did not change the hash")
	}

	if render.Version < 1 {
		t.Fatal("render.Version must be set")
	}
}

// TestKubeProxyFollowsTheRecordedMode: while a kube-proxy switch is pending
// (spec.cni.kubeProxy moved, status.cni.kubeProxy not yet), Talos's side
// keeps the recorded mode; the operation moves the record at its Talos step.
func TestKubeProxyFollowsTheRecordedMode(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		spec, recorded string
		want           bool
	}{
		{ichorv1alpha1.KubeProxyReplaced, ichorv1alpha1.KubeProxyEnabled, true},
		{ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced, false},
		{ichorv1alpha1.KubeProxyReplaced, "", false},
		{ichorv1alpha1.KubeProxyReplaced, ichorv1alpha1.KubeProxyReplaced, false},
	} {
		in := input(t)
		in.Machine = machine("m-1", ichorv1alpha1.RoleControlPlane)
		in.Cluster.Spec.CNI.KubeProxy = tc.spec
		in.Cluster.Status.CNI.KubeProxy = tc.recorded

		if x, _ := get(values(t, renderOK(t, in)), "KubeProxyConfig:enabled"); x != tc.want {
			t.Errorf("spec %s, recorded %q: KubeProxyConfig:enabled = %v, want %v", tc.spec, tc.recorded, x, tc.want)
		}
	}
}

func TestSystemLayer(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name        string
		role        string
		kubeProxy   string
		schedulable bool
		wantTaint   bool
		wantProxy   bool
	}{
		{"control plane, kube-proxy replaced, tainted", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.KubeProxyReplaced, false, true, false},
		{"control plane, kube-proxy enabled, schedulable", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.KubeProxyEnabled, true, false, true},
		{"worker", ichorv1alpha1.RoleWorker, ichorv1alpha1.KubeProxyEnabled, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Machine = machine("m-1", tc.role)
			in.Cluster.Spec.CNI.KubeProxy = tc.kubeProxy
			in.Cluster.Spec.ControlPlane.Schedulable = new(tc.schedulable)

			r := renderOK(t, in)
			v := values(t, r)

			if hasKind(v, "KubeFlannelCNIConfig") {
				t.Error("Talos's Flannel CNI is still rendered")
			}

			if tc.role == ichorv1alpha1.RoleControlPlane {
				if x, _ := get(v, "KubeProxyConfig:enabled"); x != tc.wantProxy {
					t.Errorf("KubeProxyConfig:enabled = %v, want %v", x, tc.wantProxy)
				}
			}

			if x, _ := get(v, "KubePrismConfig:port"); x != 7445 {
				t.Errorf("KubePrismConfig:port = %v", x)
			}

			_, tainted := get(v, `KubeNodeConfig:taints["node-role.kubernetes.io/control-plane"]`)
			if tainted != tc.wantTaint {
				t.Errorf("control-plane taint present = %v, want %v", tainted, tc.wantTaint)
			}

			if x, _ := get(v, "VolumeConfig/EPHEMERAL:provisioning.diskSelector.match"); x != `disk.wwid == "naa.5000c500a0b1c2d3"` {
				t.Errorf("EPHEMERAL selector = %v", x)
			}

			if x, _ := get(v, "UserVolumeConfig/data:provisioning.diskSelector.match"); x != `disk.serial == "S3Z9NB0K"` {
				t.Errorf("user volume selector = %v", x)
			}

			if x, _ := get(v, "UserVolumeConfig/data:provisioning.maxSize"); x != "100GiB" {
				t.Errorf("user volume maxSize = %v", x)
			}

			if x, _ := get(v, "HostnameConfig:hostname"); x != "m-1" {
				t.Errorf("hostname = %v", x)
			}

			if x, _ := get(v, `KubeNodeConfig:labels["example.com/rack"]`); x != "r1" {
				t.Errorf("node label = %v", x)
			}

			if _, err := r.Validate(); err != nil {
				t.Errorf("machinery refuses the render: %v", err)
			}
		})
	}
}

func TestUnmanagedCNI(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		talosCNI    string
		wantFlannel bool
	}{{"default", true}, {"none", false}} {
		in := input(t)
		in.Cluster.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged, Unmanaged: &ichorv1alpha1.UnmanagedCNISpec{TalosCNI: tc.talosCNI}}

		r := renderOK(t, in)
		v := values(t, r)

		if hasKind(v, "KubeFlannelCNIConfig") != tc.wantFlannel {
			t.Errorf("talosCNI %s: Flannel rendered = %v, want %v", tc.talosCNI, !tc.wantFlannel, tc.wantFlannel)
		}

		// kube-proxy is left as generated.
		if x, _ := get(v, "KubeProxyConfig:enabled"); x != nil {
			t.Errorf("talosCNI %s: kube-proxy set to %v", tc.talosCNI, x)
		}
	}
}

func TestLegacyContract(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Cluster.Spec.VersionContract = "v1.12"
	in.Machine.Spec.Disks = nil

	r := renderOK(t, in)
	v := values(t, r)

	for path, want := range map[string]any{
		"v1alpha1:cluster.network.cni.name":               "none",
		"v1alpha1:cluster.proxy.disabled":                 true,
		"v1alpha1:machine.features.kubePrism.port":        7445,
		"v1alpha1:machine.features.kubePrism.enabled":     true,
		`v1alpha1:machine.nodeLabels["example.com/rack"]`: "r1",
	} {
		if x, _ := get(v, path); x != want {
			t.Errorf("%s = %v, want %v", path, x, want)
		}
	}

	if hasKind(v, "KubeProxyConfig") {
		t.Error("a v1.12 contract render carries multi-document Kubernetes configuration")
	}
}

func TestLayersAndPriority(t *testing.T) {
	t.Parallel()

	cp := machine("cp-1", ichorv1alpha1.RoleControlPlane)
	all := []ichorv1alpha1.TalosConfigPatch{
		patch("m", ichorv1alpha1.LayerMachine, -5, ichorv1alpha1.PatchTarget{MachineName: "cp-1"}, sysctl("machine")),
		patch("s", ichorv1alpha1.LayerSelector, 100, ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}}, sysctl("selector")),
		patch("r", ichorv1alpha1.LayerRole, 100, ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane}, sysctl("role")),
		patch("c-high", ichorv1alpha1.LayerCluster, 10, ichorv1alpha1.PatchTarget{}, sysctl("cluster-high")),
		patch("c-low", ichorv1alpha1.LayerCluster, 1, ichorv1alpha1.PatchTarget{}, sysctl("cluster-low")),
	}

	want := func(t *testing.T, patches []ichorv1alpha1.TalosConfigPatch, m *ichorv1alpha1.TalosMachine, value, layer, name string) {
		t.Helper()

		in := input(t)
		in.Machine = m
		in.Patches = patches

		r := renderOK(t, in)
		v := values(t, r)

		key := `SysctlConfig:params["net.core.somaxconn"]`
		if x, _ := get(v, key); x != value {
			t.Errorf("value = %v, want %q", x, value)
		}

		o, err := r.Origins()
		if err != nil {
			t.Fatal(err)
		}

		for p, got := range o {
			if p.String() == key && (got.Layer != layer || got.Patch != name) {
				t.Errorf("origin = %+v, want %s/%s", got, layer, name)
			}
		}
	}

	t.Run("machine wins", func(t *testing.T) { want(t, all, cp, "machine", "machine", "m") })
	t.Run("selector over role", func(t *testing.T) { want(t, all[1:], cp, "selector", "selector", "s") })
	t.Run("role over cluster", func(t *testing.T) { want(t, all[2:], cp, "role", "role", "r") })
	t.Run("priority within a layer", func(t *testing.T) { want(t, all[3:], cp, "cluster-high", "cluster", "c-high") })

	t.Run("name breaks a tie", func(t *testing.T) {
		tie := []ichorv1alpha1.TalosConfigPatch{
			patch("zz", ichorv1alpha1.LayerCluster, 3, ichorv1alpha1.PatchTarget{}, sysctl("zz")),
			patch("aa", ichorv1alpha1.LayerCluster, 3, ichorv1alpha1.PatchTarget{}, sysctl("aa")),
		}
		want(t, tie, cp, "zz", "cluster", "zz")
	})

	t.Run("targets", func(t *testing.T) {
		// On a worker in zone b, another machine's name: only the cluster layer applies.
		w := machine("w-1", ichorv1alpha1.RoleWorker)
		w.Labels = map[string]string{"zone": "b"}
		want(t, all, w, "cluster-high", "cluster", "c-high")
	})

	t.Run("other cluster and deleted patches", func(t *testing.T) {
		other := patch("o", ichorv1alpha1.LayerMachine, 0, ichorv1alpha1.PatchTarget{MachineName: "cp-1"}, sysctl("other"))
		other.Spec.ClusterName = "staging"
		ns := patch("n", ichorv1alpha1.LayerMachine, 0, ichorv1alpha1.PatchTarget{MachineName: "cp-1"}, sysctl("ns"))
		ns.Namespace = "elsewhere"
		gone := patch("g", ichorv1alpha1.LayerMachine, 0, ichorv1alpha1.PatchTarget{MachineName: "cp-1"}, sysctl("gone"))
		gone.DeletionTimestamp = &metav1.Time{}
		want(t, append([]ichorv1alpha1.TalosConfigPatch{other, ns, gone}, all[1:]...), cp, "selector", "selector", "s")
	})
}

func TestOrigins(t *testing.T) {
	t.Parallel()

	in := input(t)
	r := renderOK(t, in)

	o, err := r.Origins()
	if err != nil {
		t.Fatal(err)
	}

	for key, want := range map[string]render.Origin{
		"KubePrismConfig:port":    {Layer: render.LayerSystem, Patch: render.PatchKubePrism},
		"KubeProxyConfig:enabled": {Layer: render.LayerSystem, Patch: render.PatchKubeProxy},
		"KubeProxyConfig:image":   {Layer: render.LayerBase},
		"HostnameConfig:hostname": {Layer: render.LayerMachine, Patch: render.PatchHostname},
		`KubeNodeConfig:taints["node-role.kubernetes.io/control-plane"]`: {Layer: render.LayerSystem, Patch: render.PatchControlPlaneTaints},
		"VolumeConfig/EPHEMERAL:provisioning.diskSelector.match":         {Layer: render.LayerSystem, Patch: render.PatchVolumes},
		"KubeClusterConfig:clusterName":                                  {Layer: render.LayerBase},
	} {
		found := false

		for p, got := range o {
			if p.String() == key {
				found = true

				if got != want {
					t.Errorf("%s: origin %+v, want %+v", key, got, want)
				}
			}
		}

		if !found {
			t.Errorf("%s: no origin", key)
		}
	}

	vals := values(t, r)
	if len(o) != len(vals) {
		t.Errorf("%d origins for %d values", len(o), len(vals))
	}
}

func TestRedacted(t *testing.T) {
	t.Parallel()

	in := input(t)
	r := renderOK(t, in)

	red, err := r.Redacted()
	if err != nil {
		t.Fatal(err)
	}

	b := in.Bundle
	secretsOf := []string{
		b.Cluster.Secret, b.Secrets.BootstrapToken, b.Secrets.SecretboxEncryptionSecret, b.TrustdInfo.Token,
		string(b.Certs.OS.Key), string(b.Certs.K8s.Key), string(b.Certs.Etcd.Key),
		string(b.Certs.K8sAggregator.Key), string(b.Certs.K8sServiceAccount.Key),
	}

	// forms are the ways a secret appears in YAML: verbatim, base64 of it
	// (v1alpha1 keys), and each line of a PEM block (a block scalar indents them).
	forms := func(s string) []string {
		out := []string{s, b64(s)}

		for _, l := range strings.Split(s, "\n") {
			if len(l) >= 40 {
				out = append(out, l)
			}
		}

		return out
	}

	for idx, s := range secretsOf {
		inReal := false

		for _, form := range forms(s) {
			if bytes.Contains(r.Bytes, []byte(form)) {
				inReal = true
			}

			if bytes.Contains(red, []byte(form)) {
				t.Errorf("redacted form contains bundle secret #%d", idx)
			}
		}

		// The real configuration carries each one, so the check above can fail.
		if !inReal {
			t.Errorf("bundle secret #%d not found in the real configuration: the leak check is blind to it", idx)
		}
	}

	if !bytes.Contains(red, []byte(render.RedactedReplacement)) {
		t.Fatal("nothing was redacted")
	}

	rv, err := r.RedactedValues()
	if err != nil {
		t.Fatal(err)
	}

	for p, v := range rv {
		s, _ := v.(string)
		for _, sec := range secretsOf {
			if s != "" && (strings.Contains(s, sec) || strings.Contains(sec, s) && len(s) > 16) {
				t.Errorf("%s carries a secret", p)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		modify func(*render.Input)
		want   string
	}{
		{"no bundle", func(in *render.Input) { in.Bundle = nil }, "secrets bundle"},
		{"no contract", func(in *render.Input) { in.Cluster.Spec.VersionContract = "" }, "version contract"},
		{"role", func(in *render.Input) { in.Machine.Spec.Role = "" }, "neither"},
		{"preset", func(in *render.Input) { in.Cluster.Spec.CNI.Preset = "flannel" }, `"flannel" is not supported`},
		{"volume name", func(in *render.Input) { in.Machine.Spec.Disks[1].VolumeName = "" }, "needs a volumeName"},
		{"disk selector", func(in *render.Input) { in.Machine.Spec.Disks[0].Disk = ichorv1alpha1.DiskSelector{} }, "names no attribute"},
		{"layer", func(in *render.Input) {
			in.Patches = []ichorv1alpha1.TalosConfigPatch{patch("p", "node", 0, ichorv1alpha1.PatchTarget{}, sysctl("1"))}
		}, `TalosConfigPatch p: unknown layer "node"`},
		{"two kinds in a document", func(in *render.Input) {
			d := sysctl("1")
			d.SysfsConfig = &mirror.SysfsConfig{}
			in.Patches = []ichorv1alpha1.TalosConfigPatch{patch("p", ichorv1alpha1.LayerCluster, 0, ichorv1alpha1.PatchTarget{}, d)}
		}, "TalosConfigPatch p: documents[0]"},
		{"selector", func(in *render.Input) {
			in.Patches = []ichorv1alpha1.TalosConfigPatch{patch("p", ichorv1alpha1.LayerSelector, 0, ichorv1alpha1.PatchTarget{
				Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}},
			}, sysctl("1"))}
		}, "target.selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			tc.modify(&in)

			_, err := render.Render(in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDiskSelectorExpression(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in   ichorv1alpha1.DiskSelector
		want string
	}{
		{ichorv1alpha1.DiskSelector{WWID: "w", Serial: "s"}, `disk.wwid == "w"`},
		{ichorv1alpha1.DiskSelector{Serial: `s"x`}, `disk.serial == "s\"x"`},
		{ichorv1alpha1.DiskSelector{ByID: "ata-X"}, `"/dev/disk/by-id/ata-X" in disk.symlinks`},
		{ichorv1alpha1.DiskSelector{ByID: "/dev/disk/by-id/ata-X"}, `"/dev/disk/by-id/ata-X" in disk.symlinks`},
		{ichorv1alpha1.DiskSelector{BusPath: "/pci0000:00/x"}, `disk.bus_path == "/pci0000:00/x"`},
		{ichorv1alpha1.DiskSelector{DevicePath: "/dev/sdb"}, `disk.dev_path == "/dev/sdb"`},
	} {
		got, err := render.DiskSelectorExpression(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestEffective(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Patches = []ichorv1alpha1.TalosConfigPatch{patch("tuning", ichorv1alpha1.LayerRole, 0, ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane}, sysctl("4096"))}
	r := renderOK(t, in)

	entries, err := r.Effective()
	if err != nil {
		t.Fatal(err)
	}

	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range []string{in.Bundle.Secrets.BootstrapToken, in.Bundle.TrustdInfo.Token, in.Bundle.Cluster.Secret} {
		if bytes.Contains(b, []byte(s)) {
			t.Fatal("the effective view carries a secret")
		}
	}

	var found, redacted bool

	for i, e := range entries {
		if i > 0 && entries[i-1].Path.String() > e.Path.String() && entries[i-1].Path.Kind == e.Path.Kind && entries[i-1].Path.Name == e.Path.Name {
			t.Fatalf("not in path order: %s before %s", entries[i-1].Path, e.Path)
		}

		switch e.Path.String() {
		case `SysctlConfig:params["net.core.somaxconn"]`:
			found = e.Value == "4096" && e.Origin == render.Origin{Layer: render.LayerRole, Patch: "tuning"}
		case "v1alpha1:cluster.token":
			redacted = e.Value == render.RedactedReplacement && e.Origin.Layer == render.LayerBase
		}
	}

	if !found || !redacted {
		t.Fatalf("effective view: sysctl entry ok=%v, cluster.token redacted=%v", found, redacted)
	}

	// Paths are JSON map keys in their string form.
	o, err := r.Origins()
	if err != nil {
		t.Fatal(err)
	}

	j, err := json.Marshal(o)
	if err != nil || !bytes.Contains(j, []byte(`"KubePrismConfig:port":{"layer":"system","patch":"ichor-kubeprism"}`)) {
		t.Fatalf("origins as JSON: %v", err)
	}
}

func TestInputsUnchanged(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Patches = []ichorv1alpha1.TalosConfigPatch{
		patch("b", ichorv1alpha1.LayerCluster, 0, ichorv1alpha1.PatchTarget{}, sysctl("1")),
		patch("a", ichorv1alpha1.LayerCluster, 0, ichorv1alpha1.PatchTarget{}, sysctl("2")),
	}

	c, m := in.Cluster.DeepCopy(), in.Machine.DeepCopy()
	p0, p1 := in.Patches[0].DeepCopy(), in.Patches[1].DeepCopy()
	bundleBefore, err := json.Marshal(in.Bundle)
	if err != nil {
		t.Fatal(err)
	}

	renderOK(t, in)

	bundleAfter, err := json.Marshal(in.Bundle)
	if err != nil {
		t.Fatal(err)
	}

	if !equality.Semantic.DeepEqual(c, in.Cluster) || !equality.Semantic.DeepEqual(m, in.Machine) ||
		!equality.Semantic.DeepEqual(*p0, in.Patches[0]) || !equality.Semantic.DeepEqual(*p1, in.Patches[1]) ||
		!bytes.Equal(bundleBefore, bundleAfter) {
		t.Fatal("Render modified its input")
	}
}

func TestInstall(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		contract string
		want     map[string]any
		absent   string
	}{
		{"v1.14", map[string]any{
			"UnattendedInstallConfig:installer.image":                 "factory.talos.dev/installer/376567988ad3:v1.14.1",
			"UnattendedInstallConfig:provisioning.diskSelector.match": `disk.wwid == "naa.1"`,
			"UnattendedInstallConfig:provisioning.wipe":               false,
		}, "v1alpha1:machine.install.image"},
		{"v1.12", map[string]any{
			"v1alpha1:machine.install.image":             "factory.talos.dev/installer/376567988ad3:v1.14.1",
			"v1alpha1:machine.install.diskSelector.wwid": "naa.1",
		}, "UnattendedInstallConfig:installer.image"},
	} {
		in := input(t)
		in.Cluster.Spec.VersionContract = tc.contract
		in.Cluster.Spec.Schematic = "376567988ad3"
		in.Machine.Spec.Disks = nil
		in.Machine.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.1"}

		r := renderOK(t, in)
		v := values(t, r)

		for path, want := range tc.want {
			if x, _ := get(v, path); x != want {
				t.Errorf("%s: %s = %v, want %v", tc.contract, path, x, want)
			}
		}

		if _, ok := get(v, tc.absent); ok {
			t.Errorf("%s: %s rendered", tc.contract, tc.absent)
		}

		if _, err := r.Validate(); err != nil {
			t.Errorf("%s: machinery refuses the render: %v", tc.contract, err)
		}
	}

	// Without an install disk nothing is rendered, as machinery's generator does.
	v := values(t, renderOK(t, input(t)))
	if hasKind(v, "UnattendedInstallConfig") {
		t.Error("install rendered without an install disk")
	}
}

func TestInstallerImage(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		schematic, override, factory string
		want                         string
	}{
		{"", "", "", "ghcr.io/siderolabs/installer:v1.14.1"},
		{"abc", "", "", "factory.talos.dev/installer/abc:v1.14.1"},
		{"abc", "", "https://factory.internal:8443/", "factory.internal:8443/installer/abc:v1.14.1"},
		{"abc", "registry.internal/talos/installer", "", "registry.internal/talos/installer:v1.14.1"},
	} {
		c := cluster()
		c.Spec.Schematic = tc.schematic
		c.Spec.Registry.InstallerImage = tc.override
		c.Spec.Registry.ImageFactoryURL = tc.factory

		got, err := render.InstallerImage(c, nil)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q %v, want %q", tc, got, err, tc.want)
		}
	}
}

// valuesOf returns the values of one kind as "path=value" strings, for
// documents whose paths carry their names.
func valuesOf(v render.Values, kind string) map[string]any {
	out := map[string]any{}

	for p, x := range v {
		if p.Kind == kind {
			out[p.String()] = x
		}
	}

	return out
}

func TestPrimaryNetwork(t *testing.T) {
	t.Parallel()

	const mac = "0a:00:00:00:00:01"

	vlan := int32(42)

	for _, tc := range []struct {
		name     string
		contract string
		net      ichorv1alpha1.MachineNetwork
		kinds    []string
		absent   []string
		contains []string
	}{
		{name: "dhcp", contract: "v1.14", net: ichorv1alpha1.MachineNetwork{MACAddress: mac, DHCP: new(true)},
			kinds: []string{"LinkAliasConfig", "DHCPv4Config"}, absent: []string{"LinkConfig", "VLANConfig"},
			contains: []string{`mac(link.permanent_addr) == "` + mac + `"`, render.PrimaryLinkAlias}},
		{name: "static", contract: "v1.14", net: ichorv1alpha1.MachineNetwork{MACAddress: mac, Addresses: []string{"192.168.10.5/24"}, Gateway: "192.168.10.1", Nameservers: []string{"192.168.10.2"}},
			kinds: []string{"LinkAliasConfig", "LinkConfig", "ResolverConfig"}, absent: []string{"DHCPv4Config"},
			contains: []string{"192.168.10.5/24", "192.168.10.1", "192.168.10.2"}},
		{name: "vlan dhcp", contract: "v1.14", net: ichorv1alpha1.MachineNetwork{MACAddress: mac, DHCP: new(true), VLAN: &vlan},
			kinds: []string{"LinkAliasConfig", "VLANConfig", "DHCPv4Config"}, contains: []string{"net0.42"}},
		{name: "vlan static", contract: "v1.14", net: ichorv1alpha1.MachineNetwork{MACAddress: mac, Addresses: []string{"10.1.0.5/16"}, VLAN: &vlan},
			kinds: []string{"LinkAliasConfig", "VLANConfig"}, absent: []string{"LinkConfig", "DHCPv4Config"}, contains: []string{"10.1.0.5/16"}},
		{name: "legacy static", contract: "v1.10", net: ichorv1alpha1.MachineNetwork{MACAddress: mac, Addresses: []string{"192.168.10.5/24"}, Gateway: "192.168.10.1"},
			kinds: []string{"v1alpha1"}, absent: []string{"LinkAliasConfig"}, contains: []string{mac, "192.168.10.5/24", "192.168.10.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Cluster.Spec.VersionContract = tc.contract
			in.Machine.Spec.Disks = nil
			in.Machine.Spec.Network = tc.net
			in.Machine.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.1"}

			r := renderOK(t, in)
			v := values(t, r)

			var all strings.Builder

			for _, k := range tc.kinds {
				// A document may hold only its name, which is no value.
				if !hasKind(v, k) && !strings.Contains(string(r.Bytes), "kind: "+k+"\n") {
					t.Errorf("no %s rendered", k)
				}

				fmt.Fprintf(&all, "%v\n", valuesOf(v, k))
			}

			for _, k := range tc.absent {
				if hasKind(v, k) {
					t.Errorf("%s rendered: %v", k, valuesOf(v, k))
				}
			}

			for _, s := range tc.contains {
				if !strings.Contains(all.String(), s) {
					t.Errorf("%q not in the rendered network documents:\n%s", s, all.String())
				}
			}

			if _, err := r.Validate(); err != nil {
				t.Errorf("machinery refuses the render: %v", err)
			}
		})
	}

	// Without a MAC nothing is rendered.
	if v := values(t, renderOK(t, input(t))); hasKind(v, "LinkAliasConfig") {
		t.Error("a link alias rendered without spec.network.macAddress")
	}
}

// TestRender_UserVolumeWithoutMaxSize: a disk given to a user volume without
// a size is used whole, and machinery accepts the render (it requires a size).
func TestRender_UserVolumeWithoutMaxSize(t *testing.T) {
	in := input(t)
	in.Machine.Spec.Disks[1].MaxSize = ""

	r := renderOK(t, in)

	v, err := render.ConfigValues(r.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	if x, _ := get(v, "UserVolumeConfig/data:provisioning.maxSize"); x != "100%" {
		t.Errorf("user volume maxSize = %v, want 100%%", x)
	}

	if _, err := r.Validate(); err != nil {
		t.Errorf("machinery refuses the render: %v", err)
	}
}
