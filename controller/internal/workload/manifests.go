package workload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// The bootstrap manifests' sync of a Kubernetes upgrade, as talosctl
// upgrade-k8s does it on Talos ≥ 1.13 (t:pkg/cluster/kubernetes/talos_managed.go
// syncManifestsSSA with siderolabs/go-kubernetes kubernetes/ssa): Talos applies
// its bootstrap manifests only when an object is missing and never updates
// them (its manifest controllers create only), so an upgrade server-side
// applies the Manifest resources a control plane renders, with Talos's field
// manager "talos" taking the fields over, each object annotated with the
// owning inventory, and records them in Talos's inventory ConfigMap
// kube-system/talos-bootstrap-manifests-inventory. Like upgrade-k8s's default
// inventory policy (AdoptIfNoInventory) an object another inventory owns is
// not taken. Differences: objects are applied one by one in Talos's order
// (namespaces, CRDs, ConfigMaps and Secrets, the rest) instead of in staged
// batches, and nothing is pruned (an object Talos no longer renders stays).

// InventoryAnnotation marks the objects an inventory owns (cli-utils'
// config.k8s.io/owning-inventory, which go-kubernetes' ssa sets).
const InventoryAnnotation = "config.k8s.io/owning-inventory"

// ManifestSync is what a sync did.
type ManifestSync struct {
	// Applied counts the objects applied; Changed those whose resourceVersion moved.
	Applied, Changed int
	// Created counts the objects that did not exist.
	Created int
}

// SyncManifests server-side applies objs (the Manifest resources' objects,
// in their order) to the cluster of cfg and records them in Talos's inventory.
func SyncManifests(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) (ManifestSync, error) {
	var res ManifestSync

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return res, err
	}

	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return res, err
	}

	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	inventory := constants.KubernetesBootstrapManifestsInventoryName

	var keys []string

	for _, o := range orderManifests(objs) {
		obj := o.DeepCopy()
		gvk := obj.GroupVersionKind()

		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()

			if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return res, fmt.Errorf("%s: %w", describeObject(obj), err)
			}
		}

		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(corev1.NamespaceDefault)
			}

			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		} else {
			obj.SetNamespace("")
		}

		live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})

		switch {
		case apierrors.IsNotFound(err):
			live = nil
		case err != nil:
			return res, fmt.Errorf("read %s: %w", describeObject(obj), err)
		}

		if live != nil {
			if owner := live.GetAnnotations()[InventoryAnnotation]; owner != "" && owner != inventory {
				return res, fmt.Errorf("%s belongs to the inventory %q, not Talos's %q: it is not taken over (remove its %s annotation to let the upgrade manage it)",
					describeObject(obj), owner, inventory, InventoryAnnotation)
			}
		}

		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}

		ann[InventoryAnnotation] = inventory
		obj.SetAnnotations(ann)

		applied, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: constants.KubernetesFieldManagerName, Force: true})
		if err != nil {
			return res, fmt.Errorf("apply %s: %w", describeObject(obj), err)
		}

		res.Applied++

		switch {
		case live == nil:
			res.Created++
			res.Changed++
		case applied.GetResourceVersion() != live.GetResourceVersion():
			res.Changed++
		}

		if gvk.Kind == "CustomResourceDefinition" {
			mapper.Reset()
		}

		keys = append(keys, InventoryKey(obj))
	}

	return res, recordInventory(ctx, k, inventory, keys)
}

// recordInventory adds keys to Talos's inventory ConfigMap (created when missing).
func recordInventory(ctx context.Context, k kubernetes.Interface, name string, keys []string) error {
	cms := k.CoreV1().ConfigMaps(constants.KubernetesInventoryNamespace)

	for range 5 {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: constants.KubernetesInventoryNamespace}}
			if _, err = cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create the inventory ConfigMap: %w", err)
			}

			continue
		}

		if err != nil {
			return fmt.Errorf("read the inventory ConfigMap: %w", err)
		}

		if cm.Data == nil {
			cm.Data = map[string]string{}
		}

		for _, key := range keys {
			cm.Data[key] = ""
		}

		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}

			return fmt.Errorf("update the inventory ConfigMap: %w", err)
		}

		return nil
	}

	return errors.New("the inventory ConfigMap kept changing while it was updated")
}

// InventoryKey is the key of an object in the inventory ConfigMap: cli-utils'
// ObjMetadata string "<namespace>_<name>_<group>_<kind>", with ":" in RBAC
// names written as "__".
func InventoryKey(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	name := obj.GetName()

	if gvk.Group == "rbac.authorization.k8s.io" {
		switch gvk.Kind {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			name = strings.ReplaceAll(name, ":", "__")
		}
	}

	return obj.GetNamespace() + "_" + name + "_" + gvk.Group + "_" + gvk.Kind
}

// orderManifests orders objects as Talos applies them: namespaces, CRDs,
// ConfigMaps and Secrets (upgrade-k8s's custom stage, so that what refers to
// them by checksum rolls after them), then the rest, each group in manifest order.
func orderManifests(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	rank := func(o *unstructured.Unstructured) int {
		gvk := o.GroupVersionKind()

		switch {
		case gvk.Group == "" && gvk.Kind == "Namespace":
			return 0
		case gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition":
			return 1
		case gvk.Group == "" && (gvk.Kind == "ConfigMap" || gvk.Kind == "Secret"):
			return 2
		default:
			return 3
		}
	}

	out := slices.Clone(objs)
	slices.SortStableFunc(out, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })

	return out
}

func describeObject(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}

	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}

// DaemonSetRolledOut reports whether a DaemonSet runs its current template on
// every node it should (kubectl rollout status's rule for DaemonSets), with
// what it waits for when not.
func DaemonSetRolledOut(ctx context.Context, k kubernetes.Interface, namespace, name string) (bool, string, error) {
	ds, err := k.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}

	st := ds.Status

	switch {
	case st.ObservedGeneration < ds.Generation:
		return false, "the DaemonSet controller has not seen the new template yet", nil
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		return false, fmt.Sprintf("%d of %d pods updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled), nil
	case st.NumberAvailable < st.DesiredNumberScheduled:
		return false, fmt.Sprintf("%d of %d updated pods available", st.NumberAvailable, st.DesiredNumberScheduled), nil
	default:
		return true, fmt.Sprintf("%d pods updated and available", st.NumberAvailable), nil
	}
}

// APIServerMetrics reads one control plane's own kube-apiserver /metrics (at
// address, not the cluster endpoint) with the admin credentials of cfg.
func APIServerMetrics(ctx context.Context, cfg *rest.Config, address string) ([]byte, error) {
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + net.JoinHostPort(address, strconv.Itoa(APIServerPort))
	c.Timeout = 15 * time.Second

	k, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, err
	}

	body, err := k.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver at %s: /metrics: %w", address, err)
	}

	return body, nil
}
