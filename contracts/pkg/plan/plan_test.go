package plan_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

func path(kind, name, field string) render.Path {
	return render.Path{Kind: kind, Name: name, Field: field}
}

func TestClassify(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		p    render.Path
		want plan.Class
	}{
		{path("SysctlConfig", "", `params["net.core.somaxconn"]`), plan.NoReboot},
		{path("LinkConfig", "eth0", "mtu"), plan.NoReboot},
		{path("KubeAPIServerConfig", "", "extraArgs.foo"), plan.APIServerRestart},
		{path("VolumeConfig", "EPHEMERAL", "provisioning.maxSize"), plan.InstallOnly},
		{path("v1alpha1", "", "machine.install.disk"), plan.InstallOnly},
		// Both install-time and reboot in the table: install-time wins.
		{path("v1alpha1", "", "machine.systemDiskEncryption.state.provider"), plan.InstallOnly},
		{path("v1alpha1", "", "machine.files"), plan.RebootRequired},
		{path("v1alpha1", "", "cluster.apiServer.certSANs"), plan.APIServerRestart},
		{path("v1alpha1", "", "machine.kubelet.image"), plan.NoReboot},
		{path("NoSuchKind", "", "x"), plan.RebootRequired},
	} {
		if got := plan.Classify(tc.p); got != tc.want {
			t.Errorf("Classify(%s) = %s, want %s", tc.p, got, tc.want)
		}
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()

	current := render.Values{
		path("SysctlConfig", "", "params.a"):    "1",
		path("SysctlConfig", "", "params.b"):    "2",
		path("LinkConfig", "eth0", "mtu"):       1500,
		path("LinkConfig", "eth0", "addresses"): []any{"10.0.0.1/24"},
	}
	desired := render.Values{
		path("SysctlConfig", "", "params.a"):    "1",
		path("LinkConfig", "eth0", "mtu"):       9000,
		path("LinkConfig", "eth0", "addresses"): []any{"10.0.0.1/24"},
		path("v1alpha1", "", "machine.files"):   []any{"x"},
	}

	got := plan.Diff(desired, current)
	want := []plan.Change{
		{Path: path("LinkConfig", "eth0", "mtu"), Op: plan.Changed, Class: plan.NoReboot},
		{Path: path("SysctlConfig", "", "params.b"), Op: plan.Removed, Class: plan.NoReboot},
		{Path: path("v1alpha1", "", "machine.files"), Op: plan.Added, Class: plan.RebootRequired},
	}

	if !slices.Equal(got, want) {
		t.Fatalf("Diff = %+v\nwant %+v", got, want)
	}

	if len(plan.Diff(desired, desired)) != 0 {
		t.Fatal("a configuration differs from itself")
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()

	ch := func(c plan.Class) plan.Change {
		return plan.Change{Path: path("K", "", c.String()), Op: plan.Changed, Class: c}
	}

	const (
		cp = ichorv1alpha1.RoleControlPlane
		w  = ichorv1alpha1.RoleWorker
	)

	for _, tc := range []struct {
		name    string
		changes []plan.Change
		role    string
		class   plan.Class
		action  plan.Action
		mode    machineapi.ApplyConfigurationRequest_Mode
		reboot  bool
	}{
		{"nothing", nil, cp, plan.NoReboot, plan.ActionNone, machineapi.ApplyConfigurationRequest_NO_REBOOT, false},
		{"no reboot", []plan.Change{ch(plan.NoReboot)}, w, plan.NoReboot, plan.ActionApply, machineapi.ApplyConfigurationRequest_NO_REBOOT, false},
		{"install only", []plan.Change{ch(plan.InstallOnly)}, w, plan.InstallOnly, plan.ActionApply, machineapi.ApplyConfigurationRequest_STAGED, false},
		{"install only and no reboot", []plan.Change{ch(plan.InstallOnly), ch(plan.NoReboot)}, cp, plan.InstallOnly, plan.ActionApply, machineapi.ApplyConfigurationRequest_NO_REBOOT, false},
		{"apiserver on a control plane", []plan.Change{ch(plan.APIServerRestart), ch(plan.NoReboot)}, cp, plan.APIServerRestart, plan.ActionWaitForRollout, machineapi.ApplyConfigurationRequest_NO_REBOOT, false},
		{"apiserver on a worker", []plan.Change{ch(plan.APIServerRestart)}, w, plan.NoReboot, plan.ActionApply, machineapi.ApplyConfigurationRequest_NO_REBOOT, false},
		{"apiserver and install only on a worker", []plan.Change{ch(plan.APIServerRestart), ch(plan.InstallOnly)}, w, plan.InstallOnly, plan.ActionApply, machineapi.ApplyConfigurationRequest_NO_REBOOT, false},
		{"reboot", []plan.Change{ch(plan.NoReboot), ch(plan.RebootRequired)}, w, plan.RebootRequired, plan.ActionWaitForRollout, machineapi.ApplyConfigurationRequest_STAGED, true},
		{"reboot beats apiserver", []plan.Change{ch(plan.APIServerRestart), ch(plan.RebootRequired), ch(plan.InstallOnly)}, cp, plan.RebootRequired, plan.ActionWaitForRollout, machineapi.ApplyConfigurationRequest_STAGED, true},
	} {
		p := plan.Decide(tc.changes, tc.role)
		if p.Class != tc.class || p.Action != tc.action || p.Mode != tc.mode || p.Reboot != tc.reboot {
			t.Errorf("%s: got %s %s %s reboot=%v, want %s %s %s reboot=%v", tc.name,
				p.Class, p.Action, p.Mode, p.Reboot, tc.class, tc.action, tc.mode, tc.reboot)
		}
	}

	p := plan.Decide([]plan.Change{ch(plan.RebootRequired), ch(plan.NoReboot)}, w)
	if got := p.Paths(plan.RebootRequired); !slices.Equal(got, []string{"K:RebootRequired"}) {
		t.Errorf("Paths(RebootRequired) = %v", got)
	}

	if got := p.AllPaths(); len(got) != 2 {
		t.Errorf("AllPaths = %v", got)
	}
}

// renders is a control plane of a one-node cluster and a render of it
// with patch documents.
func renders(tb testing.TB) (*ichorv1alpha1.TalosMachine, func(*ichorv1alpha1.TalosMachine, ...mirror.PatchDocument) []byte) {
	tb.Helper()

	b, err := bundle.Generate(secrets.NewFixedClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)), "v1.14")
	if err != nil {
		tb.Fatal(err)
	}

	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:     ichorv1alpha1.ClusterEndpoint{Host: "10.0.0.10"},
			ControlPlane: ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(true)},
			CNI:          ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium},
		},
	}
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp-1"},
		Spec:       ichorv1alpha1.TalosMachineSpec{ClusterName: "prod", Role: ichorv1alpha1.RoleControlPlane},
	}

	return m, func(m *ichorv1alpha1.TalosMachine, docs ...mirror.PatchDocument) []byte {
		tb.Helper()

		in := render.Input{Cluster: c, Machine: m, Bundle: b}
		if len(docs) > 0 {
			in.Patches = []ichorv1alpha1.TalosConfigPatch{{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
				Spec:       ichorv1alpha1.TalosConfigPatchSpec{ClusterName: "prod", Layer: ichorv1alpha1.LayerCluster, Documents: docs},
			}}
		}

		r, err := render.Render(in)
		if err != nil {
			tb.Fatal(err)
		}

		return r.Bytes
	}
}

// reencoded is the configuration of cfg in other bytes: with machinery's
// documentation comments, as a node keeps what `talosctl gen config` wrote.
func reencoded(tb testing.TB, cfg []byte) []byte {
	tb.Helper()

	c, err := configloader.NewFromBytes(cfg)
	if err != nil {
		tb.Fatal(err)
	}

	out, err := c.EncodeBytes(encoder.WithComments(encoder.CommentsAll))
	if err != nil {
		tb.Fatal(err)
	}

	if bytes.Equal(out, cfg) {
		tb.Fatal("re-encoding with comments gave the same bytes")
	}

	return out
}

// TestFromRenders plans between two real renders.
func TestFromRenders(t *testing.T) {
	t.Parallel()

	m, doRender := renders(t)
	base := doRender(m)

	withDisk := m.DeepCopy()
	withDisk.Spec.Disks = []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{Serial: "S1"}, Role: ichorv1alpha1.DiskRoleEphemeral}}

	for _, tc := range []struct {
		name    string
		desired []byte
		action  plan.Action
		mode    machineapi.ApplyConfigurationRequest_Mode
		paths   []string
	}{
		{"same", base, plan.ActionNone, machineapi.ApplyConfigurationRequest_NO_REBOOT, nil},
		{"same, other bytes", reencoded(t, base), plan.ActionNone, machineapi.ApplyConfigurationRequest_NO_REBOOT, nil},
		{
			"sysctl", doRender(m, mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}}),
			plan.ActionApply, machineapi.ApplyConfigurationRequest_NO_REBOOT, []string{`SysctlConfig:params["vm.swappiness"]`},
		},
		{
			"apiserver", doRender(m, mirror.PatchDocument{KubeAPIServerConfig: &mirror.KubeAPIServerConfig{Env: map[string]string{"GOGC": "50"}}}),
			plan.ActionWaitForRollout, machineapi.ApplyConfigurationRequest_NO_REBOOT, []string{"KubeAPIServerConfig:env.GOGC"},
		},
		{
			"ephemeral disk", doRender(withDisk),
			plan.ActionApply, machineapi.ApplyConfigurationRequest_STAGED, []string{"VolumeConfig/EPHEMERAL:provisioning.diskSelector.match"},
		},
	} {
		p, err := plan.FromBytes(tc.desired, base, ichorv1alpha1.RoleControlPlane)
		if err != nil {
			t.Fatal(err)
		}

		if p.Action != tc.action || p.Mode != tc.mode || !slices.Equal(p.AllPaths(), tc.paths) {
			t.Errorf("%s: %s %s %v, want %s %s %v", tc.name, p.Action, p.Mode, p.AllPaths(), tc.action, tc.mode, tc.paths)
		}
	}
}

// BenchmarkFromBytes plans a machine in sync: the node keeps the bytes it
// was sent (nothing decoded), or the same configuration in other bytes
// (both decoded and compared).
func BenchmarkFromBytes(b *testing.B) {
	m, doRender := renders(b)
	base := doRender(m)

	for _, bc := range []struct {
		name    string
		current []byte
	}{{"same bytes", bytes.Clone(base)}, {"other bytes", reencoded(b, base)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()

			for b.Loop() {
				p, err := plan.FromBytes(base, bc.current, ichorv1alpha1.RoleControlPlane)
				if err != nil || p.Action != plan.ActionNone {
					b.Fatalf("%s %v", p.Action, err)
				}
			}
		})
	}
}
