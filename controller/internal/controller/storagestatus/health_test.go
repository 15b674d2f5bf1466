package storagestatus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/storagestatus"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func storageCondition(t *testing.T, name, typ string, check func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error) {
	t.Helper()

	testenv.Eventually(t, timeout, typ+" of "+name, func() error {
		ts := &ichorv1alpha1.TalosStorage{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ts); err != nil {
			return err
		}

		c := apimeta.FindStatusCondition(ts.Status.Conditions, typ)
		if c == nil || c.ObservedGeneration != ts.Generation {
			return fmt.Errorf("no condition for generation %d yet: %+v", ts.Generation, c)
		}

		return check(ts, c)
	})
}

// TestNodesPrepared: a TalosStorage reports, per selected machine, whether
// the Talos side is ready, read from the node's VolumeStatus: not installed,
// then installed without the preset's volume, then with it provisioned; Ready
// follows, so whatever installs the storage system can wait for it.
func TestNodesPrepared(t *testing.T) {
	ctx := context.Background()

	em, err := world.Machine(diskNode)
	testenv.Must(t, err)

	now := metav1.Now()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: diskNode, Labels: map[string]string{"storage": "yes"}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: cluster, Role: ichorv1alpha1.RoleControlPlane, Address: em.IP(), Hostname: diskNode,
			Identity: ichorv1alpha1.MachineIdentity{UUID: em.UUID()},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
			Disks:    []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{Serial: "DATA-A"}, Role: ichorv1alpha1.DiskRoleStorage}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, m))

	ts := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prep"},
		Spec: ichorv1alpha1.TalosStorageSpec{
			ClusterName: cluster, Preset: ichorv1alpha1.StoragePresetLonghornV1,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"storage": "yes"}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, ts))

	notPrepared := func(why string) func(*ichorv1alpha1.TalosStorage, *metav1.Condition) error {
		return func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error {
			if c.Status != metav1.ConditionFalse || c.Reason != storagestatus.NodesNotPreparedReason || !strings.Contains(c.Message, diskNode+": "+why) ||
				ts.Status.ReadyNodes != 0 || !slices.Equal(ts.Status.UnpreparedNodes, []string{diskNode}) {
				return fmt.Errorf("%s %s %q, ready %d, unprepared %v", c.Status, c.Reason, c.Message, ts.Status.ReadyNodes, ts.Status.UnpreparedNodes)
			}

			if r := apimeta.FindStatusCondition(ts.Status.Conditions, ichorv1alpha1.ReadyCondition); r == nil || r.Status != metav1.ConditionFalse {
				return fmt.Errorf("Ready %+v while not prepared", r)
			}

			return nil
		}
	}

	storageCondition(t, "prep", ichorv1alpha1.NodesPreparedCondition, notPrepared("not installed yet"))

	// Installed with a render that lacks the preset (no TalosStorage in it).
	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, c))

	bare, err := render.Render(render.Input{Cluster: c, Machine: m, Bundle: theBundle})
	testenv.Must(t, err)
	testenv.Must(t, em.ApplyInMaintenance(ctx, bare.Bytes, 30*time.Second))
	testenv.UpdateStatus(t, k8s, m, func(cur *ichorv1alpha1.TalosMachine) { cur.Status.Installed = true })

	storageCondition(t, "prep", ichorv1alpha1.NodesPreparedCondition, notPrepared("volume(s) u-longhorn not provisioned"))

	// The machine's configuration reconciler would apply the render with the
	// preset; the test applies it as Ichor does (verified identity, no reboot).
	full, err := render.Render(render.Input{Cluster: c, Machine: m, Bundle: theBundle, Storages: []ichorv1alpha1.TalosStorage{*ts}})
	testenv.Must(t, err)

	n, err := (&talos.Dialer{}).Dial(ctx, em.IP(), theBundle)
	testenv.Must(t, err)
	t.Cleanup(n.Close)

	v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(m))
	testenv.Must(t, err)

	_, err = v.Apply(ctx, full.Bytes, machine.ApplyConfigurationRequest_NO_REBOOT)
	testenv.Must(t, err)

	storageCondition(t, "prep", ichorv1alpha1.NodesPreparedCondition, func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error {
		if c.Status != metav1.ConditionTrue || ts.Status.ReadyNodes != 1 || len(ts.Status.UnpreparedNodes) != 0 {
			return fmt.Errorf("%s %s %q, ready %d, unprepared %v", c.Status, c.Reason, c.Message, ts.Status.ReadyNodes, ts.Status.UnpreparedNodes)
		}

		if r := apimeta.FindStatusCondition(ts.Status.Conditions, ichorv1alpha1.ReadyCondition); r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v once prepared", r)
		}

		return nil
	})
}

// settingCRD is Longhorn's settings.longhorn.io at v1beta2 with the fields the
// check reads, written by hand from longhorn-manager's own type
// (k8s/pkg/apis/longhorn/v1beta2/setting.go: a top-level value string and
// status.applied), since tools/talosemu/longhorn generates only nodes and replicas.
func settingCRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}

	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "settings.longhorn.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "longhorn.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "settings", Singular: "setting", Kind: "Setting", ListKind: "SettingList", ShortNames: []string{"lhs"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1beta2", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": str, "kind": str, "metadata": {Type: "object"}, "value": str,
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"applied": {Type: "boolean"}}},
					},
				}},
			}},
		},
	}
}

// TestStorageConsistent: a longhorn-v1 TalosStorage that registers disks
// through the Node reports whether Longhorn honours the registration: Unknown
// before Longhorn is installed, False while its setting
// create-default-disk-labeled-nodes is false, True once it is true; with
// diskRegistration None there is nothing to check.
func TestStorageConsistent(t *testing.T) {
	ctx := context.Background()

	lh := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registering"},
		Spec: ichorv1alpha1.TalosStorageSpec{
			ClusterName: cluster, Preset: ichorv1alpha1.StoragePresetLonghornV1,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"none": "none"}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, lh))

	none := lh.DeepCopy()
	none.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "unregistered"}
	none.Spec.DiskRegistration = ichorv1alpha1.DiskRegistrationNone
	testenv.Must(t, k8s.Create(ctx, none))

	want := func(status metav1.ConditionStatus, reason string) func(*ichorv1alpha1.TalosStorage, *metav1.Condition) error {
		return func(_ *ichorv1alpha1.TalosStorage, c *metav1.Condition) error {
			if c.Status != status || c.Reason != reason {
				return fmt.Errorf("%s %s %q, want %s %s", c.Status, c.Reason, c.Message, status, reason)
			}

			return nil
		}
	}

	storageCondition(t, "registering", ichorv1alpha1.StorageConsistentCondition, want(metav1.ConditionUnknown, storage.StorageNotInstalledReason))
	storageCondition(t, "unregistered", ichorv1alpha1.StorageConsistentCondition, want(metav1.ConditionTrue, storage.NoRegistrationReason))

	// Longhorn is installed with its default: the setting false.
	ax, err := apiextensions.NewForConfig(restCfg)
	testenv.Must(t, err)

	crd := settingCRD()
	_, err = ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	testenv.Must(t, err)
	testenv.Eventually(t, timeout, "settings.longhorn.io established", func() error {
		got, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}

		return fmt.Errorf("not established")
	})
	testenv.Must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: storage.LonghornNamespace}}))

	setting := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "longhorn.io/v1beta2", "kind": "Setting",
		"metadata": map[string]any{"namespace": storage.LonghornNamespace, "name": storage.LonghornCreateDefaultDiskSetting},
		"value":    "false",
	}}
	testenv.Must(t, k8s.Create(ctx, setting))

	storageCondition(t, "registering", ichorv1alpha1.StorageConsistentCondition, want(metav1.ConditionFalse, storage.RegistrationIgnoredReason))

	testenv.Must(t, k8s.Patch(ctx, setting, client.RawPatch(client.Merge.Type(), []byte(`{"value":"true"}`))))

	storageCondition(t, "registering", ichorv1alpha1.StorageConsistentCondition, want(metav1.ConditionTrue, storage.StorageConsistentReason))
	storageCondition(t, "unregistered", ichorv1alpha1.StorageConsistentCondition, want(metav1.ConditionTrue, storage.NoRegistrationReason))
}

// TestDiskRegistrationNeedsLonghornV1: the API server refuses
// diskRegistration NodeLabels on a preset without a Node registration Ichor
// renders, naming the way out; longhorn-v1 and None are admitted.
func TestDiskRegistrationNeedsLonghornV1(t *testing.T) {
	ctx := context.Background()

	mk := func(name, preset, reg string) *ichorv1alpha1.TalosStorage {
		return &ichorv1alpha1.TalosStorage{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.TalosStorageSpec{
				ClusterName: cluster, Preset: preset, DiskRegistration: reg,
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"none": "none"}},
			},
		}
	}

	err := k8s.Create(ctx, mk("raw-labels", ichorv1alpha1.StoragePresetRaw, ichorv1alpha1.DiskRegistrationNodeLabels))
	if err == nil || !strings.Contains(err.Error(), "only the longhorn-v1 preset renders") || !strings.Contains(err.Error(), "set None") {
		t.Fatalf("raw with NodeLabels: %v, want the refusal with its way out", err)
	}

	testenv.Must(t, k8s.Create(ctx, mk("raw-none", ichorv1alpha1.StoragePresetRaw, ichorv1alpha1.DiskRegistrationNone)))
	testenv.Must(t, k8s.Create(ctx, mk("lh-labels", ichorv1alpha1.StoragePresetLonghornV1, ichorv1alpha1.DiskRegistrationNodeLabels)))
}
