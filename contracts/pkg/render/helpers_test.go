package render_test

import (
	"encoding/base64"
	"sync"
	"testing"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

var (
	bundleOnce sync.Once
	theBundle  *secrets.Bundle
	bundleErr  error
)

func testBundle(t testing.TB) *secrets.Bundle {
	t.Helper()

	bundleOnce.Do(func() {
		theBundle, bundleErr = bundle.Generate(secrets.NewFixedClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)), "v1.14")
	})

	if bundleErr != nil {
		t.Fatal(bundleErr)
	}

	return theBundle
}

func cluster() *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: "prod-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 3, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

func machine(name, role string) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"zone": "a"}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod",
			Role:        role,
			Hostname:    name,
			Labels:      map[string]string{"example.com/rack": "r1"},
			Disks: []ichorv1alpha1.DiskRole{
				{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.5000c500a0b1c2d3"}, Role: ichorv1alpha1.DiskRoleEphemeral},
				{Disk: ichorv1alpha1.DiskSelector{Serial: "S3Z9NB0K"}, Role: ichorv1alpha1.DiskRoleUserVolume, VolumeName: "data", MaxSize: "100GiB"},
			},
		},
	}
}

func input(t testing.TB) render.Input {
	return render.Input{Cluster: cluster(), Machine: machine("cp-1", ichorv1alpha1.RoleControlPlane), Bundle: testBundle(t)}
}

func renderOK(t testing.TB, in render.Input) *render.Result {
	t.Helper()

	r, err := render.Render(in)
	if err != nil {
		t.Fatal(err)
	}

	return r
}

func patch(name, layer string, prio int32, target ichorv1alpha1.PatchTarget, docs ...mirror.PatchDocument) ichorv1alpha1.TalosConfigPatch {
	return ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: "prod", Layer: layer, Priority: prio, Target: target, Documents: docs,
		},
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func mustContract(t testing.TB) *talosconfig.VersionContract {
	t.Helper()

	vc, err := bundle.Contract("v1.14")
	if err != nil {
		t.Fatal(err)
	}

	return vc
}
