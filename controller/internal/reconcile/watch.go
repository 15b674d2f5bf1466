package reconcile

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// ClusterMembers is the handler of a watch on TalosClusters for a controller
// of another kind: when a cluster's spec.paused changes, it enqueues the
// cluster's objects of that kind (list is an empty list of the kind), so
// unpausing resumes them at once. Other changes of the cluster enqueue
// nothing.
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

			if ok1 && ok2 && o.Spec.Paused != n.Spec.Paused {
				enqueue(ctx, n, q)
			}
		},
	}
}

// ClusterPaused reports whether the TalosCluster namespace/name exists and
// has spec.paused, for controllers of kinds that are not Ichor's (the kubelet
// serving-certificate approver reconciles CertificateSigningRequests) and so
// cannot run on the skeleton's Controller.
func ClusterPaused(ctx context.Context, c client.Reader, namespace, name string) (bool, error) {
	tc := &ichorv1alpha1.TalosCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, tc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}

		return false, err
	}

	return tc.Spec.Paused, nil
}
