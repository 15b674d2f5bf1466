package storagestatus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// Reasons of the NodesPrepared condition.
const (
	NodesPreparedReason    = "Prepared"
	NodesNotPreparedReason = "NodesNotPrepared"
	NoNodesSelectedReason  = "NoNodesSelected"
)

// prepared reads, on each selected machine's node, the volumes its preset
// makes (render.VolumeIntents, storage.NodeVolumesReady over Talos's
// VolumeStatus) and sets NodesPrepared, readyNodes and unpreparedNodes: the
// Talos side of the storage, per node (architecture "Storage": TalosStorage
// reports health so whatever installs the storage system can wait). A
// machine not installed yet, or whose node does not answer, is not prepared.
// Ready follows NodesPrepared (SummarizeTalosStorage).
func (r *Reconciler) prepared(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
	ts := s.Object

	set := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&ts.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.NodesPreparedCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: ts.Generation,
		})
	}

	selected, err := r.selected(ctx, ts)
	if err != nil {
		return ctrl.Result{}, err
	}

	ts.Status.ReadyNodes, ts.Status.UnpreparedNodes = 0, nil

	if len(selected) == 0 {
		set(metav1.ConditionFalse, NoNodesSelectedReason, "no approved machine matches spec.nodeSelector (empty: every worker): there is nothing to prepare yet")

		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}

	if s.Cluster == nil {
		set(metav1.ConditionFalse, NodesNotPreparedReason, "TalosCluster "+ts.Spec.ClusterName+" does not exist: its machines cannot be read")

		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}

	var storages ichorv1alpha1.TalosStorageList
	if err := r.Client.List(ctx, &storages, client.InNamespace(ts.Namespace)); err != nil {
		return ctrl.Result{}, err
	}

	b, err := machinestate.LoadBundle(ctx, r.APIReader, s.Cluster)
	if err != nil {
		if machinestate.IsStalled(err) {
			set(metav1.ConditionFalse, NodesNotPreparedReason, err.Error())

			return ctrl.Result{RequeueAfter: r.resync()}, nil
		}

		return ctrl.Result{}, err
	}

	dialer := r.Nodes
	if dialer == nil {
		dialer = &talos.Dialer{}
	}

	var waits []string

	for i := range selected {
		m := &selected[i]

		why := r.nodePrepared(ctx, dialer, b, m, storages.Items)
		if why == "" {
			ts.Status.ReadyNodes++

			continue
		}

		ts.Status.UnpreparedNodes = append(ts.Status.UnpreparedNodes, m.Name)
		waits = append(waits, m.Name+": "+why)
	}

	slices.Sort(ts.Status.UnpreparedNodes)

	if len(waits) == 0 {
		set(metav1.ConditionTrue, NodesPreparedReason, fmt.Sprintf("the Talos side of all %d selected machine(s) is ready: the %s preset's volumes are provisioned",
			len(selected), ts.Spec.Preset))

		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}

	set(metav1.ConditionFalse, NodesNotPreparedReason, fmt.Sprintf("%d of %d selected machine(s) ready on the Talos side; waiting for %s",
		ts.Status.ReadyNodes, len(selected), strings.Join(waits, "; ")))

	return ctrl.Result{RequeueAfter: r.resync()}, nil
}

// nodePrepared is "" when machine m's storage volumes are provisioned on its
// node, else what it waits for.
func (r *Reconciler) nodePrepared(ctx context.Context, dialer *talos.Dialer, b *secrets.Bundle, m *ichorv1alpha1.TalosMachine,
	storages []ichorv1alpha1.TalosStorage,
) string {
	if !m.Status.Installed || m.Spec.Address == "" {
		return "not installed yet"
	}

	intents, err := render.VolumeIntents(m, storages)
	if err != nil {
		return err.Error()
	}

	n, err := dialer.Dial(ctx, m.Spec.Address, b)
	if err != nil {
		return "node unreachable: " + talos.Message(err)
	}
	defer n.Close()

	vols, _, err := n.Volumes(ctx)
	if err != nil {
		return "cannot read its volumes: " + talos.Message(err)
	}

	out := make([]storage.Volume, 0, len(vols))
	for _, v := range vols {
		out = append(out, storage.Volume{ID: v.ID, Phase: v.Phase, Parent: v.Parent, Size: v.Size})
	}

	if ok, missing := storage.NodeVolumesReady(intents, out); !ok {
		return "volume(s) " + strings.Join(missing, ", ") + " not provisioned"
	}

	return ""
}

// consistency reads Longhorn's create-default-disk-labeled-nodes setting in
// the cluster when the TalosStorage registers disks through the Node, and
// sets StorageConsistent (storage.CheckConsistency).
func (r *Reconciler) consistency(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
	ts := s.Object

	set := func(rep storage.ConsistencyReport) {
		apimeta.SetStatusCondition(&ts.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.StorageConsistentCondition, Status: rep.Status, Reason: rep.Reason, Message: rep.Message, ObservedGeneration: ts.Generation,
		})
	}

	registers := render.RegistersDisks(ts)
	if !registers {
		set(storage.CheckConsistency(ts.Spec.Preset, ts.Spec.DiskRegistration, false, storage.LonghornSetting{}))

		return ctrl.Result{}, nil
	}

	if s.Cluster == nil {
		set(storage.ConsistencyReport{Status: metav1.ConditionUnknown, Reason: storage.StorageUnreadableReason,
			Message: "TalosCluster " + ts.Spec.ClusterName + " does not exist: Longhorn's settings cannot be read"})

		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}

	got, err := r.longhornSetting(ctx, s.Cluster)
	if err != nil {
		set(storage.ConsistencyReport{Status: metav1.ConditionUnknown, Reason: storage.StorageUnreadableReason,
			Message: "cannot read Longhorn's setting " + storage.LonghornCreateDefaultDiskSetting + ": " + err.Error()})

		return ctrl.Result{RequeueAfter: r.resync()}, nil //nolint:nilerr // the condition carries the error; the next resync reads again
	}

	set(storage.CheckConsistency(ts.Spec.Preset, ts.Spec.DiskRegistration, true, got))

	return ctrl.Result{RequeueAfter: r.resync()}, nil
}

// longhornSetting reads settings.longhorn.io create-default-disk-labeled-nodes
// from the cluster; Served is false while Longhorn's CRD is not installed.
func (r *Reconciler) longhornSetting(ctx context.Context, cl *ichorv1alpha1.TalosCluster) (storage.LonghornSetting, error) {
	cfg, err := r.workloadConfig(ctx, cl)
	if err != nil {
		return storage.LonghornSetting{}, err
	}

	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return storage.LonghornSetting{}, err
	}

	gv := storage.LonghornSettingResource.GroupVersion().String()

	resources, err := dc.ServerResourcesForGroupVersion(gv)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return storage.LonghornSetting{}, nil
		}

		return storage.LonghornSetting{}, err
	}

	if !slices.ContainsFunc(resources.APIResources, func(a metav1.APIResource) bool { return a.Name == storage.LonghornSettingResource.Resource }) {
		return storage.LonghornSetting{}, nil
	}

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return storage.LonghornSetting{}, err
	}

	obj, err := dyn.Resource(storage.LonghornSettingResource).Namespace(storage.LonghornNamespace).Get(ctx, storage.LonghornCreateDefaultDiskSetting, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return storage.LonghornSetting{Served: true}, nil
	}

	if err != nil {
		return storage.LonghornSetting{}, err
	}

	value, _, _ := unstructured.NestedString(obj.Object, "value") // a missing or odd value is not "true"

	return storage.LonghornSetting{Served: true, Found: true, Value: value}, nil
}

func (r *Reconciler) resync() time.Duration {
	if r.Resync > 0 {
		return r.Resync
	}

	return DefaultResync
}
