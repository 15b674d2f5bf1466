// Package longhorn puts Longhorn's CRDs into an emulated workload cluster and
// runs VolumeControllerStandIn, a test stand-in for the part of Longhorn's
// controllers an eviction goes through. It is test tooling: see README.md.
package longhorn

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Namespace is the namespace Longhorn's chart installs into.
const Namespace = "longhorn-system"

// Field names of Longhorn's node and replica specs.
const (
	fieldEvictionRequested = "evictionRequested"
	fieldAllowScheduling   = "allowScheduling"
	fieldName              = "name"
)

// The resources of Longhorn's API the stand-in and the tests use.
var (
	NodeResource    = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "nodes"}
	ReplicaResource = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "replicas"}
)

//go:embed crds/*.yaml
var crds embed.FS

// Install creates Longhorn's namespace and CRDs and waits until they are established.
func Install(ctx context.Context, cfg *rest.Config) error {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := k.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}

	ax, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}

	files, err := fs.Glob(crds, "crds/*.yaml")
	if err != nil {
		return err
	}

	var names []string

	for _, f := range files {
		raw, err := crds.ReadFile(f)
		if err != nil {
			return err
		}

		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}

		if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}

		names = append(names, crd.Name)
	}

	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // not there yet: poll again
			}

			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}

			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", n, err)
		}
	}

	return nil
}

// DiskUUID is the disk UUID CreateNode gives a node's disk (a replica's spec.diskID).
func DiskUUID(node, disk string) string { return node + "-" + disk + "-uuid" }

// CreateNode creates Longhorn's node object for a Kubernetes Node, as Longhorn's
// node controller does, schedulable, with the disks named (a filesystem disk
// each, under /var/mnt/<disk>) and their UUIDs in status.
func CreateNode(ctx context.Context, c dynamic.Interface, name string, disks ...string) error {
	specDisks := map[string]any{}
	diskStatus := map[string]any{}

	for _, d := range disks {
		specDisks[d] = map[string]any{
			"diskType": "filesystem", "path": "/var/mnt/" + d, fieldAllowScheduling: true, fieldEvictionRequested: false,
			"storageReserved": int64(0), "tags": []any{},
		}
		diskStatus[d] = map[string]any{"diskUUID": DiskUUID(name, d), "diskName": d, "diskPath": "/var/mnt/" + d, "diskType": "filesystem"}
	}

	n := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "longhorn.io/v1beta2", "kind": "Node",
		"metadata": map[string]any{fieldName: name, "namespace": Namespace},
		"spec":     map[string]any{fieldName: name, fieldAllowScheduling: true, fieldEvictionRequested: false, "disks": specDisks, "tags": []any{}},
	}}

	created, err := c.Resource(NodeResource).Namespace(Namespace).Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Longhorn node %s: %w", name, err)
	}

	created.Object["status"] = map[string]any{"diskStatus": diskStatus}

	if _, err := c.Resource(NodeResource).Namespace(Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing Longhorn node %s's disk status: %w", name, err)
	}

	return nil
}

// Replica is one replica a test creates.
type Replica struct {
	Name   string
	Volume string
	Node   string
	// Disk is the disk's name on the node; its UUID (DiskUUID) becomes spec.diskID.
	Disk string
	// Healthy sets spec.healthyAt; otherwise the replica has never been healthy.
	Healthy bool
}

// CreateReplica creates a replicas.longhorn.io object.
func CreateReplica(ctx context.Context, c dynamic.Interface, r Replica) error {
	healthyAt := ""
	if r.Healthy {
		healthyAt = time.Now().UTC().Format(time.RFC3339)
	}

	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "longhorn.io/v1beta2", "kind": "Replica",
		"metadata": map[string]any{fieldName: r.Name, "namespace": Namespace, "labels": map[string]any{"longhornvolume": r.Volume}},
		"spec": map[string]any{
			"volumeName": r.Volume, "nodeID": r.Node, "diskID": DiskUUID(r.Node, r.Disk), "diskPath": "/var/mnt/" + r.Disk,
			"dataEngine": "v1", "healthyAt": healthyAt, "failedAt": "", fieldEvictionRequested: false,
		},
	}}

	if _, err := c.Resource(ReplicaResource).Namespace(Namespace).Create(ctx, o, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Longhorn replica %s: %w", r.Name, err)
	}

	return nil
}

// VolumeControllerStandIn is a TEST STAND-IN for Longhorn's node and volume
// controllers, only as far as an eviction goes (README.md): it marks the
// replicas of an evicted, unschedulable node or disk with
// spec.evictionRequested, and deletes such a replica once its volume has
// another healthy, non-evicting replica. It is not Longhorn.
type VolumeControllerStandIn struct {
	Client dynamic.Interface
	// Interval is how often it looks; zero means 200ms.
	Interval time.Duration
	// Deleted counts the replicas it deleted.
	Deleted func(name string)
}

// Run runs Step every Interval until ctx ends.
func (s *VolumeControllerStandIn) Run(ctx context.Context) {
	iv := s.Interval
	if iv <= 0 {
		iv = 200 * time.Millisecond
	}

	t := time.NewTicker(iv)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Step(ctx) // the next tick tries again, as a controller's requeue does
		}
	}
}

// Step runs one pass: mark, then delete.
func (s *VolumeControllerStandIn) Step(ctx context.Context) error {
	nodes, err := s.Client.Resource(NodeResource).Namespace(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	// evicting[node] is true for a whole-node eviction; evictingDisks holds
	// the UUIDs of evicted disks. Eviction takes effect only where scheduling
	// is disabled.
	evicting := map[string]bool{}
	evictingDisks := map[string]bool{}

	for _, n := range nodes.Items {
		allow, _, _ := unstructured.NestedBool(n.Object, "spec", fieldAllowScheduling)
		evict, _, _ := unstructured.NestedBool(n.Object, "spec", fieldEvictionRequested)

		if evict && !allow {
			evicting[n.GetName()] = true
		}

		disks, _, _ := unstructured.NestedMap(n.Object, "spec", "disks")
		for name, d := range disks {
			dm, _ := d.(map[string]any)
			dAllow, _ := dm[fieldAllowScheduling].(bool)
			dEvict, _ := dm[fieldEvictionRequested].(bool)

			if dEvict && (!dAllow || !allow) {
				uuid, _, _ := unstructured.NestedString(n.Object, "status", "diskStatus", name, "diskUUID")
				evictingDisks[uuid] = true
			}
		}
	}

	replicas, err := s.Client.Resource(ReplicaResource).Namespace(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	var errs []error

	byVolume := map[string][]*unstructured.Unstructured{}

	for i := range replicas.Items {
		r := &replicas.Items[i]
		node, _, _ := unstructured.NestedString(r.Object, "spec", "nodeID")
		disk, _, _ := unstructured.NestedString(r.Object, "spec", "diskID")
		marked, _, _ := unstructured.NestedBool(r.Object, "spec", fieldEvictionRequested)

		if should := evicting[node] || evictingDisks[disk]; should != marked {
			if err := unstructured.SetNestedField(r.Object, should, "spec", fieldEvictionRequested); err != nil {
				return err
			}

			updated, err := s.Client.Resource(ReplicaResource).Namespace(Namespace).Update(ctx, r, metav1.UpdateOptions{})
			if err != nil {
				errs = append(errs, err)

				continue
			}

			*r = *updated
		}

		vol, _, _ := unstructured.NestedString(r.Object, "spec", "volumeName")
		byVolume[vol] = append(byVolume[vol], r)
	}

	for _, rs := range byVolume {
		if err := s.cleanup(ctx, rs); err != nil {
			errs = append(errs, err)
		}
	}

	return errors.Join(errs...)
}

// cleanup deletes the evicting replicas of one volume when a healthy,
// non-evicting replica remains (cleanupEvictionRequestedReplicas).
func (s *VolumeControllerStandIn) cleanup(ctx context.Context, rs []*unstructured.Unstructured) error {
	healthyElsewhere := false

	for _, r := range rs {
		evicting, _, _ := unstructured.NestedBool(r.Object, "spec", fieldEvictionRequested)
		if healthy(r) && !evicting {
			healthyElsewhere = true
		}
	}

	if !healthyElsewhere {
		return nil
	}

	for _, r := range rs {
		if evicting, _, _ := unstructured.NestedBool(r.Object, "spec", fieldEvictionRequested); !evicting {
			continue
		}

		err := s.Client.Resource(ReplicaResource).Namespace(Namespace).Delete(ctx, r.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}

		if err == nil && s.Deleted != nil {
			s.Deleted(r.GetName())
		}
	}

	return nil
}

// healthy is Longhorn's IsAvailableHealthyReplica: not being deleted, healthyAt set, failedAt empty.
func healthy(r *unstructured.Unstructured) bool {
	healthyAt, _, _ := unstructured.NestedString(r.Object, "spec", "healthyAt")
	failedAt, _, _ := unstructured.NestedString(r.Object, "spec", "failedAt")

	return r.GetDeletionTimestamp() == nil && healthyAt != "" && failedAt == ""
}
