package render_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// wantSystem checks that each path holds its value and was set by the system patch name.
func wantSystem(t *testing.T, r *render.Result, patch string, want map[string]any) {
	t.Helper()

	v := values(t, r)

	o, err := r.Origins()
	if err != nil {
		t.Fatal(err)
	}

	for path, w := range want {
		x, ok := get(v, path)
		if !ok || fmt.Sprint(x) != fmt.Sprint(w) {
			t.Errorf("%s = %v (present %t), want %v", path, x, ok, w)
		}

		for p, got := range o {
			if p.String() == path && got != (render.Origin{Layer: render.LayerSystem, Patch: patch}) {
				t.Errorf("%s: origin %+v, want system/%s", path, got, patch)
			}
		}
	}
}

// noneFrom checks that no value of the render came from the system patch name.
func noneFrom(t *testing.T, r *render.Result, patch string) {
	t.Helper()

	o, err := r.Origins()
	if err != nil {
		t.Fatal(err)
	}

	for p, got := range o {
		if got.Patch == patch {
			t.Errorf("%s set by %s, which should render nothing", p, patch)
		}
	}

	for _, s := range r.Steps {
		if s.Name == patch {
			t.Errorf("step %s rendered", patch)
		}
	}
}

func validates(t *testing.T, r *render.Result) {
	t.Helper()

	if _, err := r.Validate(); err != nil {
		t.Errorf("machinery refuses the render: %v", err)
	}
}

func TestMetricsExposure(t *testing.T) {
	t.Parallel()

	rule := map[string]any{
		"NetworkRuleConfig/ichor-controlplane-metrics:portSelector.ports":    []any{10257, 10259, 2381},
		"NetworkRuleConfig/ichor-controlplane-metrics:portSelector.protocol": "tcp",
		// Masked: machinery wants the network, not a host in it.
		"NetworkRuleConfig/ichor-controlplane-metrics:ingress": []any{map[string]any{"subnet": "10.20.0.0/16"}},
	}

	for _, tc := range []struct {
		contract string
		want     map[string]any
	}{
		{"v1.14", map[string]any{
			"KubeControllerManagerConfig:extraArgs.bind-address":  "0.0.0.0",
			"KubeSchedulerConfig:extraArgs.bind-address":          "0.0.0.0",
			"v1alpha1:cluster.etcd.extraArgs.listen-metrics-urls": "http://0.0.0.0:2381",
		}},
		{"v1.12", map[string]any{
			"v1alpha1:cluster.controllerManager.extraArgs.bind-address": "0.0.0.0",
			"v1alpha1:cluster.scheduler.extraArgs.bind-address":         "0.0.0.0",
			"v1alpha1:cluster.etcd.extraArgs.listen-metrics-urls":       "http://0.0.0.0:2381",
		}},
	} {
		t.Run(tc.contract, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Cluster.Spec.VersionContract = tc.contract
			in.Machine.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.1"}
			in.Cluster.Spec.Monitoring = ichorv1alpha1.MonitoringSpec{ExposeControlPlaneMetrics: true}

			r := renderOK(t, in)
			wantSystem(t, r, render.PatchMetrics, tc.want)
			validates(t, r)

			// Without scrapeCIDR no firewall rule: nothing is restricted.
			if hasKind(values(t, r), "NetworkRuleConfig") {
				t.Error("a NetworkRuleConfig without scrapeCIDR")
			}

			in.Cluster.Spec.Monitoring.ScrapeCIDR = "10.20.30.0/16"
			r = renderOK(t, in)
			wantSystem(t, r, render.PatchMetrics, tc.want)
			wantSystem(t, r, render.PatchMetrics, rule)
			validates(t, r)

			// Only allow rules: Ichor never sets the default action.
			if hasKind(values(t, r), "NetworkDefaultActionConfig") {
				t.Error("the render sets a default firewall action")
			}
		})
	}

	t.Run("worker and off", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Machine = machine("w-1", ichorv1alpha1.RoleWorker)
		in.Cluster.Spec.Monitoring = ichorv1alpha1.MonitoringSpec{ExposeControlPlaneMetrics: true, ScrapeCIDR: "10.0.0.0/8"}
		noneFrom(t, renderOK(t, in), render.PatchMetrics)

		// scrapeCIDR alone exposes nothing, so restricts nothing.
		in = input(t)
		in.Cluster.Spec.Monitoring = ichorv1alpha1.MonitoringSpec{ScrapeCIDR: "10.0.0.0/8"}
		r := renderOK(t, in)
		noneFrom(t, r, render.PatchMetrics)

		if x, ok := get(values(t, r), "KubeControllerManagerConfig:extraArgs.bind-address"); ok {
			t.Errorf("bind-address %v with metrics off", x)
		}
	})

	t.Run("bad CIDR", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Cluster.Spec.Monitoring = ichorv1alpha1.MonitoringSpec{ExposeControlPlaneMetrics: true, ScrapeCIDR: "10.0.0.0"}

		_, err := render.Render(in)
		if err == nil || !strings.Contains(err.Error(), `spec.monitoring.scrapeCIDR "10.0.0.0" is not a CIDR`) {
			t.Fatalf("error %v", err)
		}
	})
}

func TestKubeletServingCertificates(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		contract, path string
	}{
		{"v1.14", `KubeletConfig:extraArgs.rotate-server-certificates`},
		{"v1.12", `v1alpha1:machine.kubelet.extraArgs.rotate-server-certificates`},
	} {
		for _, role := range []string{ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker} {
			in := input(t)
			in.Cluster.Spec.VersionContract = tc.contract
			in.Machine = machine("m-1", role)
			in.Machine.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.1"}
			in.Cluster.Spec.Security.KubeletServingCertificates = true

			r := renderOK(t, in)
			wantSystem(t, r, render.PatchKubeletServing, map[string]any{tc.path: "true"})
			validates(t, r)

			// The patch sets only the flag: the kubelet image stays the base's.
			o, err := r.Origins()
			if err != nil {
				t.Fatal(err)
			}

			for p, got := range o {
				if p.String() == "KubeletConfig:image" && got.Layer != render.LayerBase {
					t.Errorf("KubeletConfig:image attributed to %+v", got)
				}
			}

			in.Cluster.Spec.Security.KubeletServingCertificates = false
			r = renderOK(t, in)
			noneFrom(t, r, render.PatchKubeletServing)

			if _, ok := get(values(t, r), tc.path); ok {
				t.Errorf("%s %s: rendered with kubeletServingCertificates off", tc.contract, role)
			}
		}
	}
}

func TestSecureBootInstaller(t *testing.T) {
	t.Parallel()

	const (
		plain  = "factory.talos.dev/installer/abc:v1.14.1"
		sb     = "factory.talos.dev/installer-secureboot/abc:v1.14.1"
		sbNone = "factory.talos.dev/installer-secureboot/" + render.DefaultSecureBootSchematic + ":v1.14.1"
	)

	on, off := new(true), new(false)

	for _, tc := range []struct {
		mode      string
		state     *bool
		schematic string
		want      string
		wantErr   bool
	}{
		{"", on, "abc", plain, false},
		{ichorv1alpha1.SecureBootOff, on, "abc", plain, false},
		{ichorv1alpha1.SecureBootPreferred, on, "abc", sb, false},
		{ichorv1alpha1.SecureBootPreferred, off, "abc", plain, false},
		{ichorv1alpha1.SecureBootPreferred, nil, "abc", plain, false},
		{ichorv1alpha1.SecureBootRequired, on, "abc", sb, false},
		{ichorv1alpha1.SecureBootRequired, nil, "abc", sb, false},
		{ichorv1alpha1.SecureBootRequired, off, "abc", "", true},
		// Without a schematic: Image Factory's default schematic, the only
		// source of signed installers; the ordinary installer stays ghcr.io's.
		{ichorv1alpha1.SecureBootRequired, on, "", sbNone, false},
		{ichorv1alpha1.SecureBootPreferred, off, "", "ghcr.io/siderolabs/installer:v1.14.1", false},
	} {
		c := cluster()
		c.Spec.Schematic = tc.schematic
		c.Spec.Security.SecureBoot = tc.mode
		m := machine("m-1", ichorv1alpha1.RoleWorker)
		m.Status.SecureBoot = tc.state

		got, err := render.InstallerImage(c, m)
		if tc.wantErr {
			if !errors.Is(err, render.ErrSecureBootRequired) || !strings.Contains(err.Error(), "does not boot with SecureBoot") {
				t.Errorf("%s/%v: %q, %v; want a SecureBoot error", tc.mode, tc.state, got, err)
			}

			continue
		}

		if err != nil || got != tc.want {
			t.Errorf("%s/%v: %q, %v; want %q", tc.mode, tc.state, got, err, tc.want)
		}
	}

	// A self-hosted factory serves the SecureBoot installer too.
	c := cluster()
	c.Spec.Schematic = "abc"
	c.Spec.Registry.ImageFactoryURL = "https://factory.internal/"
	c.Spec.Security.SecureBoot = ichorv1alpha1.SecureBootRequired

	if got, err := render.InstallerImage(c, nil); err != nil || got != "factory.internal/installer-secureboot/abc:v1.14.1" {
		t.Errorf("self-hosted factory: %q, %v", got, err)
	}

	// Through Render: the install document carries it, from the install patch;
	// a node without SecureBoot under Required has no configuration.
	in := input(t)
	in.Cluster.Spec.Schematic = "abc"
	in.Cluster.Spec.Security.SecureBoot = ichorv1alpha1.SecureBootRequired
	in.Machine.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.1"}
	in.Machine.Status.SecureBoot = on

	r := renderOK(t, in)
	wantSystem(t, r, render.PatchInstall, map[string]any{"UnattendedInstallConfig:installer.image": sb})
	validates(t, r)

	in.Machine.Status.SecureBoot = off
	if _, err := render.Render(in); !errors.Is(err, render.ErrSecureBootRequired) {
		t.Errorf("Render under Required of a node without SecureBoot: %v", err)
	}

	in.Cluster.Spec.Security.SecureBoot = "Sometimes"
	if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), `"Sometimes" is not Off, Preferred or Required`) {
		t.Errorf("unknown mode: %v", err)
	}
}

func storage(name, preset string, sel *metav1.LabelSelector) ichorv1alpha1.TalosStorage {
	return ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: "prod", Preset: preset, NodeSelector: sel},
	}
}

func storageWorker() *ichorv1alpha1.TalosMachine {
	m := machine("w-1", ichorv1alpha1.RoleWorker)
	m.Spec.Disks = append(m.Spec.Disks,
		ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.s1"}, Role: ichorv1alpha1.DiskRoleStorage},
		ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: "S2"}, Role: ichorv1alpha1.DiskRoleStorage, MaxSize: "500GiB"},
	)

	return m
}

func TestStoragePresetLonghornV1(t *testing.T) {
	t.Parallel()

	zone := &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	want := map[string]any{
		"UserVolumeConfig/longhorn:provisioning.diskSelector.match":   `disk.wwid == "naa.s1"`,
		"UserVolumeConfig/longhorn:provisioning.maxSize":              "100%",
		"UserVolumeConfig/longhorn-2:provisioning.diskSelector.match": `disk.serial == "S2"`,
		"UserVolumeConfig/longhorn-2:provisioning.maxSize":            "500GiB",
	}

	for _, tc := range []struct {
		name     string
		storages []ichorv1alpha1.TalosStorage
	}{
		{"empty selector selects workers", []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}},
		{"label selector", []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, zone)}},
		{"two storages, one preset", []ichorv1alpha1.TalosStorage{
			storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil), storage("lh2", ichorv1alpha1.StoragePresetLonghornV1, zone),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Machine = storageWorker()
			in.Storages = tc.storages

			r := renderOK(t, in)
			wantSystem(t, r, render.PatchStorage, want)
			validates(t, r)

			// The disk roles' own volumes are untouched.
			wantSystem(t, r, render.PatchVolumes, map[string]any{"UserVolumeConfig/data:provisioning.diskSelector.match": `disk.serial == "S3Z9NB0K"`})
		})
	}

	other := storage("other", ichorv1alpha1.StoragePresetLonghornV1, nil)
	other.Spec.ClusterName = "staging"
	elsewhere := storage("elsewhere", ichorv1alpha1.StoragePresetLonghornV1, nil)
	elsewhere.Namespace = "other"
	gone := storage("gone", ichorv1alpha1.StoragePresetLonghornV1, nil)
	gone.DeletionTimestamp = &metav1.Time{}

	for _, tc := range []struct {
		name     string
		machine  *ichorv1alpha1.TalosMachine
		storages []ichorv1alpha1.TalosStorage
	}{
		{"no storage", storageWorker(), nil},
		{"not selected", storageWorker(), []ichorv1alpha1.TalosStorage{
			storage("lh", ichorv1alpha1.StoragePresetLonghornV1, &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}),
		}},
		{"other cluster, namespace, deleted", storageWorker(), []ichorv1alpha1.TalosStorage{other, elsewhere, gone}},
		{"control plane, empty selector", func() *ichorv1alpha1.TalosMachine {
			m := storageWorker()
			m.Spec.Role = ichorv1alpha1.RoleControlPlane

			return m
		}(), []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}},
		{"other preset's storage elsewhere", storageWorker(), []ichorv1alpha1.TalosStorage{
			storage("raw", ichorv1alpha1.StoragePresetRaw, &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}),
		}},
		{"no storage disk", machine("w-1", ichorv1alpha1.RoleWorker), []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Machine = tc.machine
			in.Storages = tc.storages

			r := renderOK(t, in)
			noneFrom(t, r, render.PatchStorage)

			if _, ok := get(values(t, r), "UserVolumeConfig/longhorn:provisioning.diskSelector.match"); ok {
				t.Error("a longhorn volume rendered")
			}
		})
	}

	t.Run("name taken by a userVolume role", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Machine = storageWorker()
		in.Machine.Spec.Disks[1].VolumeName = render.LonghornVolumeName
		in.Storages = []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}

		r := renderOK(t, in)
		wantSystem(t, r, render.PatchVolumes, map[string]any{"UserVolumeConfig/longhorn:provisioning.diskSelector.match": `disk.serial == "S3Z9NB0K"`})
		wantSystem(t, r, render.PatchStorage, map[string]any{
			"UserVolumeConfig/longhorn-2:provisioning.diskSelector.match": `disk.wwid == "naa.s1"`,
			"UserVolumeConfig/longhorn-3:provisioning.diskSelector.match": `disk.serial == "S2"`,
		})
		validates(t, r)
	})

	t.Run("bad selector", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Machine = storageWorker()
		in.Storages = []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}})}

		if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "TalosStorage lh: spec.nodeSelector") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestStorageSelects(t *testing.T) {
	t.Parallel()

	w, cp := machine("w-1", ichorv1alpha1.RoleWorker), machine("cp-1", ichorv1alpha1.RoleControlPlane)
	zone := &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	empty := &metav1.LabelSelector{}

	for _, tc := range []struct {
		sel  *metav1.LabelSelector
		m    *ichorv1alpha1.TalosMachine
		want bool
	}{
		{nil, w, true}, {nil, cp, false}, {empty, w, true}, {empty, cp, false}, {zone, cp, true}, {zone, w, true},
		{&metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}, w, false},
	} {
		s := storage("s", ichorv1alpha1.StoragePresetLonghornV1, tc.sel)

		got, err := render.StorageSelects(&s, tc.m)
		if err != nil || got != tc.want {
			t.Errorf("selector %v on %s: %t, %v; want %t", tc.sel, tc.m.Name, got, err, tc.want)
		}
	}
}

// dump lists a render's values of the kinds as "path=value", for a failure message.
func dump(t *testing.T, r *render.Result, kinds ...string) []string {
	t.Helper()

	var out []string

	for p, x := range values(t, r) {
		for _, k := range kinds {
			if p.Kind == k {
				out = append(out, fmt.Sprintf("%s=%v", p, x))
			}
		}
	}

	return out
}

// kernelModuleDocs are the names of the render's KernelModuleConfig
// documents, in order (a document with only a name has no value path).
func kernelModuleDocs(t *testing.T, r *render.Result) []string {
	t.Helper()

	c, err := configloader.NewFromBytes(r.Bytes, configloader.WithNoValidation())
	if err != nil {
		t.Fatal(err)
	}

	var out []string

	for _, d := range c.Documents() {
		if n, ok := d.(talosconfig.NamedDocument); ok && d.Kind() == "KernelModuleConfig" {
			out = append(out, n.Name())
		}
	}

	return out
}

func TestStoragePresetFilesystem(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Machine = storageWorker()
	in.Storages = []ichorv1alpha1.TalosStorage{storage("fs", ichorv1alpha1.StoragePresetFilesystem, nil)}

	r := renderOK(t, in)
	wantSystem(t, r, render.PatchStorage, map[string]any{
		"UserVolumeConfig/storage:provisioning.diskSelector.match":   `disk.wwid == "naa.s1"`,
		"UserVolumeConfig/storage:provisioning.maxSize":              "100%",
		"UserVolumeConfig/storage-2:provisioning.diskSelector.match": `disk.serial == "S2"`,
		"UserVolumeConfig/storage-2:provisioning.maxSize":            "500GiB",
	})
	validates(t, r)

	if hasKind(values(t, r), "RawVolumeConfig") {
		t.Errorf("the filesystem preset rendered a raw volume: %v", dump(t, r, "RawVolumeConfig"))
	}
}

func TestStoragePresetRaw(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Machine = storageWorker()
	in.Storages = []ichorv1alpha1.TalosStorage{storage("ceph", ichorv1alpha1.StoragePresetRaw, nil)}

	r := renderOK(t, in)
	wantSystem(t, r, render.PatchStorage, map[string]any{
		"RawVolumeConfig/storage:provisioning.diskSelector.match":   `disk.wwid == "naa.s1"`,
		"RawVolumeConfig/storage:provisioning.maxSize":              "100%",
		"RawVolumeConfig/storage-2:provisioning.diskSelector.match": `disk.serial == "S2"`,
		"RawVolumeConfig/storage-2:provisioning.maxSize":            "500GiB",
	})
	validates(t, r)

	// No storage disk becomes a formatted user volume.
	for _, name := range []string{"storage", "storage-2"} {
		if _, ok := get(values(t, r), "UserVolumeConfig/"+name+":provisioning.diskSelector.match"); ok {
			t.Errorf("the raw preset formats storage disk %s: %v", name, dump(t, r, "UserVolumeConfig"))
		}
	}
}

func TestStoragePresetLonghornV2(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		contract string
		want     map[string]any
		modules  []string
	}{
		{"v1.14", map[string]any{`SysctlConfig:params["vm.nr_hugepages"]`: render.LonghornV2HugePages}, render.LonghornV2KernelModules},
		{"v1.12", map[string]any{
			`v1alpha1:machine.sysctls["vm.nr_hugepages"]`: render.LonghornV2HugePages,
			"v1alpha1:machine.kernel.modules":             "[map[name:nvme_tcp] map[name:vfio_pci] map[name:uio_pci_generic]]",
		}, nil},
	} {
		t.Run(tc.contract, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Cluster.Spec.VersionContract = tc.contract
			in.Machine = storageWorker()
			in.Machine.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.system"}
			in.Storages = []ichorv1alpha1.TalosStorage{storage("lh2", ichorv1alpha1.StoragePresetLonghornV2, nil)}

			r := renderOK(t, in)
			wantSystem(t, r, render.PatchStorage, tc.want)
			validates(t, r)

			if got := kernelModuleDocs(t, r); fmt.Sprint(got) != fmt.Sprint(tc.modules) {
				t.Errorf("KernelModuleConfig documents %v, want %v", got, tc.modules)
			}

			// V2 takes its block disks whole: no volume on a storage disk.
			v := values(t, r)
			if hasKind(v, "RawVolumeConfig") {
				t.Errorf("raw volumes rendered: %v", dump(t, r, "RawVolumeConfig"))
			}

			for _, name := range []string{"longhorn", "storage"} {
				if _, ok := get(v, "UserVolumeConfig/"+name+":provisioning.diskSelector.match"); ok {
					t.Errorf("a volume %s rendered on a storage disk", name)
				}
			}
		})
	}

	t.Run("with longhorn-v1", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Machine = storageWorker()
		in.Storages = []ichorv1alpha1.TalosStorage{
			storage("lh2", ichorv1alpha1.StoragePresetLonghornV2, nil), storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil),
		}

		r := renderOK(t, in)
		wantSystem(t, r, render.PatchStorage, map[string]any{
			`SysctlConfig:params["vm.nr_hugepages"]`:                    render.LonghornV2HugePages,
			"UserVolumeConfig/longhorn:provisioning.diskSelector.match": `disk.wwid == "naa.s1"`,
		})
		validates(t, r)
	})
}

// TestStoragePresetsClaimingDisksRefused: two presets that each make volumes
// of the storage disks cannot select one machine; each alone can.
func TestStoragePresetsClaimingDisksRefused(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Machine = storageWorker()
	in.Storages = []ichorv1alpha1.TalosStorage{
		storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil), storage("ceph", ichorv1alpha1.StoragePresetRaw, nil),
	}

	_, err := render.Render(in)
	if err == nil || !strings.Contains(err.Error(), "longhorn-v1 (TalosStorage lh) and raw (TalosStorage ceph)") ||
		!strings.Contains(err.Error(), "spec.nodeSelector") {
		t.Errorf("two disk-claiming presets on w-1: %v", err)
	}

	in.Storages[1].Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}
	renderOK(t, in)
}

// TestAuthentication: spec.authentication replaces a control plane's
// KubeAuthenticationConfig with the validated configuration (the health
// paths still anonymous), leaves workers and a cluster without it alone, and
// is refused under a contract without the document.
func TestAuthentication(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Cluster.Spec.Authentication.External = &ichorv1alpha1.ExternalOIDC{
		IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}, UsernameClaim: "email", GroupsClaim: "groups",
	}

	r := renderOK(t, in)
	validates(t, r)

	ac := r.Config.K8sAuthenticationConfig()
	if ac == nil {
		t.Fatal("the control plane's render has no KubeAuthenticationConfig")
	}

	got := ac.Configuration()
	jwts, _ := got["jwt"].([]any)
	anon, _ := got["anonymous"].(map[string]any)

	if len(jwts) != 1 || anon["enabled"] != true {
		t.Fatalf("KubeAuthenticationConfig.configuration %v: want one JWT authenticator and the anonymous health paths", got)
	}

	jwt, _ := jwts[0].(map[string]any)
	if issuer, _ := jwt["issuer"].(map[string]any); issuer["url"] != "https://login.example.com" {
		t.Fatalf("the authenticator's issuer %v", jwt["issuer"])
	}

	// Without it, the document machinery generates: no JWT authenticator.
	in.Cluster.Spec.Authentication = ichorv1alpha1.AuthenticationSpec{}
	r = renderOK(t, in)
	noneFrom(t, r, render.PatchAuthentication)

	ac = r.Config.K8sAuthenticationConfig()
	if ac == nil {
		t.Fatal("without spec.authentication the control plane has no KubeAuthenticationConfig (machinery generates one)")
	}

	if jwts, _ := ac.Configuration()["jwt"].([]any); len(jwts) != 0 {
		t.Fatalf("without spec.authentication: %v", ac)
	}

	// A worker carries no kube-apiserver configuration.
	in = input(t)
	in.Cluster.Spec.Authentication.External = &ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}}
	in.Machine = machine("w-1", ichorv1alpha1.RoleWorker)
	r = renderOK(t, in)
	noneFrom(t, r, render.PatchAuthentication)

	// Under v1.12 there is no document to carry it: refused, not dropped.
	in = input(t)
	in.Cluster.Spec.Authentication.External = &ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}}
	in.Cluster.Spec.VersionContract = "v1.12"

	if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "v1.14 version contract") {
		t.Fatalf("spec.authentication under v1.12: %v", err)
	}

	// What the kube-apiserver would refuse is refused here.
	in = input(t)
	in.Cluster.Spec.Authentication.External = &ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}, CertificateAuthority: "junk"}

	if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "certificateAuthority") {
		t.Fatalf("an invalid CA: %v", err)
	}
}

// TestAuthenticationIchorUsers: ichorUsers renders ichor-ui's issuer as the
// IchorInstallation publishes it (Input.Issuer), and refuses to render
// without it rather than leave the kube-apiserver trusting nothing new.
func TestAuthenticationIchorUsers(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Cluster.Spec.Authentication.IchorUsers = true

	if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "not published yet") {
		t.Fatalf("ichorUsers without a published issuer: %v", err)
	}

	in.Issuer = &ichorv1alpha1.IssuerStatus{URL: "https://ichor.example.com", DiscoveryURL: "https://10.96.0.20:8444/.well-known/openid-configuration"}
	r := renderOK(t, in)
	validates(t, r)

	jwts, _ := r.Config.K8sAuthenticationConfig().Configuration()["jwt"].([]any)
	if len(jwts) != 1 {
		t.Fatalf("jwt %v", jwts)
	}

	jwt, _ := jwts[0].(map[string]any)
	if issuer, _ := jwt["issuer"].(map[string]any); issuer["discoveryURL"] != in.Issuer.DiscoveryURL || issuer["url"] != in.Issuer.URL {
		t.Fatalf("the authenticator's issuer %v", jwt["issuer"])
	}
}
