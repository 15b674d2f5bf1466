package machinestate

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestRendersRenderAgainOnlyOnChange: a machine whose inputs did not change
// gets its kept render (bytes and hash, no Config), so does one whose
// cluster's status moved; a new patch, a change of the machine, of the
// cluster's spec or of the bundle Secret renders again, and a
// render Load makes fresh agrees with the kept one byte for byte.
func TestRendersRenderAgainOnlyOnChange(t *testing.T) {
	ctx := context.Background()
	const ns = "renders"

	testenv.Must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	b, err := bundle.Generate(secrets.NewFixedClock(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)), "v1.14")
	testenv.Must(t, err)

	ref := ichorv1alpha1.SecretReference{Name: "prod-bundle"}
	sec, err := bundle.Secret(ns, ref, b)
	testenv.Must(t, err)
	testenv.Must(t, env.Client.Create(ctx, sec))

	cl := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2", SecretsBundleRef: ref,
			Endpoint:     ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			ControlPlane: ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:          ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium},
		},
	}
	testenv.Must(t, env.Client.Create(ctx, cl))

	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-1"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Role: ichorv1alpha1.RoleWorker, Address: "10.0.0.21",
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
		},
	}
	testenv.Must(t, env.Client.Create(ctx, m))

	var kept Renders

	// look loads through kept and reports whether it rendered, checking the
	// result against a fresh Load of the same objects.
	look := func(step string) (rendered bool, hash string) {
		t.Helper()

		cur := &ichorv1alpha1.TalosMachine{}
		testenv.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(m), cur))

		st, err := kept.Load(ctx, env.Client, env.Client, cur)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}

		fresh, err := Load(ctx, env.Client, env.Client, cur)
		testenv.Must(t, err)

		if st.Result.Hash != fresh.Result.Hash || string(st.Result.Bytes) != string(fresh.Result.Bytes) {
			t.Fatalf("%s: the kept render %s is not what a render gives now, %s", step, st.Result.Hash, fresh.Result.Hash)
		}

		return st.Result.Config != nil, st.Result.Hash
	}

	expect := func(step string, want bool) string {
		t.Helper()

		got, hash := look(step)
		if got != want {
			t.Fatalf("%s: rendered %v, want %v", step, got, want)
		}

		return hash
	}

	first := expect("first look", true)
	if expect("nothing changed", false) != first {
		t.Fatal("the kept render's hash changed")
	}

	p := &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swappiness"},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: "prod", Layer: ichorv1alpha1.LayerCluster,
			Documents: []mirror.PatchDocument{{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}}},
		},
	}
	testenv.Must(t, env.Client.Create(ctx, p))

	if expect("a new patch", true) == first {
		t.Fatal("the patch changed nothing in the render")
	}

	expect("nothing changed after the patch", false)

	m.Spec.Hostname = "worker-1"
	testenv.Must(t, env.Client.Update(ctx, m))
	expect("the machine's hostname", true)
	expect("nothing changed after the hostname", false)

	now := metav1.Now()
	cl.Status.Discovery.LastScanTime = &now
	cl.Status.Workers.Ready = 1
	testenv.Must(t, env.Client.Status().Update(ctx, cl))
	expect("the cluster's status (a discovery scan, a machine count)", false)

	cl.Spec.KubernetesVersion = "1.37.3"
	testenv.Must(t, env.Client.Update(ctx, cl))
	expect("the cluster's Kubernetes version", true)

	sec.Annotations = map[string]string{"touched": "yes"}
	testenv.Must(t, env.Client.Update(ctx, sec))
	expect("a new version of the bundle Secret", true)
	expect("nothing changed at the end", false)
}
