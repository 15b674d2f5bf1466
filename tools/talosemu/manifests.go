package talosemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
)

// Talos's bootstrap manifests (bootstrap_manifests.go) and the inline manifests, the way Talos
// v1.14's manifest controllers handle them (t:internal/app/machined/pkg/controllers/k8s/control_plane.go renders each inline manifest
// into an ExtraManifestsConfig entry with priority "99";
// t:internal/app/machined/pkg/controllers/k8s/extra_manifest.go turns it into a Manifest
// resource "99-<name>"; t:internal/app/machined/pkg/controllers/k8s/manifest_apply.go applies
// the Manifest resources):
//
//   - the apply runs under the etcd mutex "talos:v1:manifestApplyMutex" whenever the Manifest
//     resources change (the rendered bootstrap manifests or the inline manifests) and at each
//     start of the control plane;
//   - it only creates: an object recorded in the inventory ConfigMap
//     kube-system/talos-bootstrap-manifests-inventory is skipped, so one deleted or changed
//     later is NOT restored, not even on a Kubernetes version change; an object that exists
//     but is not recorded is left as it is and recorded; a missing one is server-side applied
//     (field manager "talos", no force) with the annotation
//     config.k8s.io/owning-inventory=talos-bootstrap-manifests-inventory and recorded;
//   - namespaces first, then CRDs, then the rest in manifest order; a malformed object is
//     reported and the others are still applied; the inventory is written even then.
//
// Updating objects that came from the manifests (and pruning removed ones) is `talosctl
// upgrade-k8s`'s job, client side (t:pkg/cluster/kubernetes/talos_managed.go
// PerformManifestsSync), not the node's.
//
// Differences: the bootstrap manifests' objects are abridged (bootstrap_manifests.go). When an
// apply aborts on a connection error Talos writes an empty inventory (its
// apply returns no contents with the error); the emulator leaves the inventory as it was.

// inventoryAnnotation marks the objects an inventory owns (go-kubernetes ssa
// InventoryAnnotationKey, from cli-utils).
const inventoryAnnotation = "config.k8s.io/owning-inventory"

// manifestsFingerprint changes when Talos's Manifest resources change: the rendered bootstrap
// manifests (their inputs: images, CIDRs, token, …) and the inline manifests.
func manifestsFingerprint(cfg talosconfig.Provider) string {
	if cfg == nil || cfg.K8sNetworkConfig() == nil || cfg.K8sClusterConfig() == nil {
		return ""
	}

	rendered, err := renderManifests(cfg)

	h := sha256.New()
	h.Write([]byte(fmt.Sprint(err) + "\x00"))

	for _, r := range rendered {
		h.Write([]byte(r.id + "\x00"))

		for _, o := range r.objs {
			b, _ := o.MarshalJSON() // decoded from YAML, so it encodes
			h.Write(b)
		}
	}

	return hex.EncodeToString(h.Sum(nil))
}

// inventoryKey is the key of an object in the inventory ConfigMap: cli-utils' ObjMetadata
// string "<namespace>_<name>_<group>_<kind>", with ":" in RBAC names written as "__".
func inventoryKey(obj *unstructured.Unstructured) string {
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

// manifestObjects returns the objects of the Manifest resources in Talos's order: manifests
// by resource ID (bootstrap manifests "00-…" to "13-…", inline manifests "99-<name>"),
// namespaces first, then CRDs (each by name), then the rest as they come
// (t:internal/app/machined/pkg/controllers/k8s/manifest_apply.go).
func manifestObjects(cfg talosconfig.Provider) ([]*unstructured.Unstructured, error) {
	rendered, err := renderManifests(cfg)

	var objs []*unstructured.Unstructured

	for _, r := range rendered {
		objs = append(objs, r.objs...)
	}

	rank := func(o *unstructured.Unstructured) int {
		gvk := o.GroupVersionKind()

		switch {
		case gvk.Kind == "Namespace" && gvk.Version == "v1":
			return 0
		case gvk.Kind == "CustomResourceDefinition" && gvk.Group == "apiextensions.k8s.io":
			return 1
		default:
			return 2
		}
	}

	sort.SliceStable(objs, func(i, j int) bool {
		ri, rj := rank(objs[i]), rank(objs[j])
		if ri != rj {
			return ri < rj
		}

		return ri < 2 && objs[i].GetName() < objs[j].GetName()
	})

	return objs, err
}

// applyManifests creates the Manifest resources' objects that are neither in the
// inventory nor in the cluster, under the etcd mutex, and records them; kubeService runs it
// after the control plane is up and whenever manifestsFingerprint changes.
func (m *Machine) applyManifests(ctx context.Context) error {
	cfg := m.activeConfig()
	if cfg == nil || cfg.K8sNetworkConfig() == nil || cfg.K8sClusterConfig() == nil {
		return nil
	}

	// a manifest that does not render or decode is reported; the others are still applied
	objs, renderErr := manifestObjects(cfg)

	rc, err := m.adminRESTConfig()
	if err != nil {
		return err
	}

	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))

	return m.withEtcdLock(ctx, constants.EtcdTalosManifestApplyMutex, func() error {
		inv, err := readInventory(ctx, kube)
		if err != nil {
			return err
		}

		applyErr := m.createMissing(ctx, mapper, dyn, objs, inv)
		if errors.Is(applyErr, errApplyAborted) {
			return applyErr
		}

		return errors.Join(renderErr, applyErr, writeInventory(ctx, kube, inv))
	})
}

// errApplyAborted marks an error after which no other object is tried (connection errors).
var errApplyAborted = errors.New("applying inline manifests aborted")

// createMissing walks objs as Talos's ManifestApplyController.apply does, adding what it
// creates or finds to inv.
//
//nolint:gocyclo,cyclop // one branch per case of Talos's apply loop
func (m *Machine) createMissing(ctx context.Context, mapper meta.RESTMapper, dyn dynamic.Interface, objs []*unstructured.Unstructured, inv map[string]string) error {
	var errs []error

	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		objName := fmt.Sprintf("%s/%s/%s/%s", gvk.Group, gvk.Version, gvk.Kind, obj.GetName())

		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || meta.IsNoMatchError(err) {
				errs = append(errs, fmt.Errorf("error creating mapping for object %s: %w", objName, err))

				continue
			}

			return fmt.Errorf("%w: error creating mapping for object %s: %w", errApplyAborted, objName, err)
		}

		var dr dynamic.ResourceInterface

		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(corev1.NamespaceDefault)
			}

			dr = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		} else {
			dr = dyn.Resource(mapping.Resource)

			// Talos v1.13 recorded cluster-scoped objects with the namespace the manifest
			// gave them; such an entry is dropped and the object skipped
			if obj.GetNamespace() != "" {
				if _, ok := inv[inventoryKey(obj)]; ok {
					delete(inv, inventoryKey(obj))

					continue
				}
			}

			obj.SetNamespace("")
		}

		key := inventoryKey(obj)
		if _, ok := inv[key]; ok {
			continue
		}

		if _, err := dr.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
			inv[key] = ""

			continue
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: error checking resource existence: %w", errApplyAborted, err)
		}

		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}

		if owner, ok := ann[inventoryAnnotation]; ok && owner != constants.KubernetesBootstrapManifestsInventoryName {
			errs = append(errs, fmt.Errorf("unexpected foreign inventory annotation on %s", objName))

			continue
		}

		ann[inventoryAnnotation] = constants.KubernetesBootstrapManifestsInventoryName
		obj.SetAnnotations(ann)

		if _, err := dr.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: constants.KubernetesFieldManagerName}); err != nil {
			if apierrors.IsMethodNotSupported(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
				errs = append(errs, fmt.Errorf("error creating %s: %w", objName, err))

				continue
			}

			return fmt.Errorf("%w: error creating %s: %w", errApplyAborted, objName, err)
		}

		m.world.logf("machine %s: manifests: created %s", m.Name(), objName)

		inv[key] = ""
	}

	return errors.Join(errs...)
}

// readInventory returns the inventory's keys, creating the empty ConfigMap when it is missing
// (go-kubernetes ssa GetInventory, used by manifest_apply.go).
func readInventory(ctx context.Context, kube kubernetes.Interface) (map[string]string, error) {
	cms := kube.CoreV1().ConfigMaps(constants.KubernetesInventoryNamespace)

	cm, err := cms.Get(ctx, constants.KubernetesBootstrapManifestsInventoryName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: constants.KubernetesBootstrapManifestsInventoryName, Namespace: constants.KubernetesInventoryNamespace,
		}}, metav1.CreateOptions{})
	}

	if err != nil {
		return nil, fmt.Errorf("error getting inventory: %w", err)
	}

	inv := make(map[string]string, len(cm.Data))
	for k := range cm.Data {
		inv[k] = ""
	}

	return inv, nil
}

// writeInventory replaces the inventory's contents (an update without a resource version, as
// go-kubernetes writes it).
func writeInventory(ctx context.Context, kube kubernetes.Interface, inv map[string]string) error {
	_, err := kube.CoreV1().ConfigMaps(constants.KubernetesInventoryNamespace).Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: constants.KubernetesBootstrapManifestsInventoryName, Namespace: constants.KubernetesInventoryNamespace},
		Data:       inv,
	}, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating inventory failed: %w", err)
	}

	return nil
}

// withEtcdLock runs f holding the etcd mutex key of the local member and releases it by
// revoking the session's lease (t:internal/pkg/etcd/lock.go WithLock).
func (m *Machine) withEtcdLock(ctx context.Context, key string, f func() error) error {
	c, _, err := m.localEtcdClient(ctx)
	if err != nil {
		return fmt.Errorf("error creating etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	session, err := concurrency.NewSession(c)
	if err != nil {
		return fmt.Errorf("error creating etcd session: %w", err)
	}

	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()

		_, _ = c.Revoke(rctx, session.Lease())
		session.Orphan()
	}()

	if err := concurrency.NewMutex(session, key).Lock(clientv3.WithRequireLeader(ctx)); err != nil {
		return fmt.Errorf("error acquiring mutex for key %s: %w", key, err)
	}

	return f()
}
