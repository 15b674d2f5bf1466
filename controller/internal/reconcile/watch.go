package reconcile

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
)

// ClusterMembers is the handler of a watch on TalosClusters for a controller
// of another kind: when a cluster's spec.paused changes, or whether its CNI
// preset is one Ichor manages (cni.Unsupported: the adoption annotation
// decides it for the unmanaged preset), it enqueues the cluster's objects of
// that kind (list is an empty list of the kind), so unpausing resumes them
// at once. Other changes of the cluster enqueue nothing.
func ClusterMembers(c client.Reader, list client.ObjectList) handler.EventHandler {
	enqueue := func(ctx context.Context, cluster client.Object, q workqueue.TypedRateLimitingInterface[ctrlreconcile.Request]) {
		l, ok := list.DeepCopyObject().(client.ObjectList)
		if !ok {
			return
		}

		if err := c.List(ctx, l, client.InNamespace(cluster.GetNamespace())); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing the objects of a cluster", "cluster", cluster.GetName())

			return
		}

		items, err := apimeta.ExtractList(l)
		if err != nil {
			return
		}

		for _, it := range items {
			m, ok := it.(interface {
				client.Object
				ClusterMember
			})
			if ok && m.GetClusterName() == cluster.GetName() {
				q.Add(ctrlreconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
			}
		}
	}

	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[ctrlreconcile.Request]) {
			o, ok1 := e.ObjectOld.(*ichorv1alpha1.TalosCluster)
			n, ok2 := e.ObjectNew.(*ichorv1alpha1.TalosCluster)

			if ok1 && ok2 && (o.Spec.Paused != n.Spec.Paused || (cni.Unsupported(o) == "") != (cni.Unsupported(n) == "")) {
				enqueue(ctx, n, q)
			}
		},
	}
}

// ClusterPaused says why the controllers must leave the objects of the
// TalosCluster namespace/name alone ("" when they need not: the cluster is
// not paused, or does not exist). The skeleton's Controller checks it for
// every object; the reconcilers with a step machine of their own (machine
// lifecycle, configuration, operations) check it first thing, with this same
// function, and count the skip with CountPausedSkip.
func ClusterPaused(ctx context.Context, c client.Reader, namespace, name string) (string, error) {
	if name == "" {
		return "", nil
	}

	tc := &ichorv1alpha1.TalosCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, tc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}

		return "", fmt.Errorf("read TalosCluster %s/%s: %w", namespace, name, err)
	}

	return pausedMessage(tc), nil
}

// pausedMessage is the reason a paused cluster gives, or "".
func pausedMessage(tc *ichorv1alpha1.TalosCluster) string {
	if tc == nil || !tc.Spec.Paused {
		return ""
	}

	return fmt.Sprintf("TalosCluster %s's spec.paused", tc.Name)
}

// PausedCondition is the Paused condition of an object left alone because
// of why (ClusterPaused's answer).
func PausedCondition(why string) metav1.Condition {
	return metav1.Condition{
		Type: ichorv1alpha1.PausedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.PausedReason,
		Message: "the controller does nothing on this object while " + why + " is true; set it to false to resume",
	}
}

// CountPausedSkip counts a reconcile that controller skipped for a pause.
func CountPausedSkip(controller string) { pausedSkips.WithLabelValues(controller).Inc() }
