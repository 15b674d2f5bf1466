package hook

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// Longhorn's API, from longhorn-manager v1.9.1's own types
// (k8s/pkg/apis/longhorn/v1beta2): node.go's NodeSpec carries allowScheduling
// and evictionRequested (DiskSpec the same two under spec.disks[<name>]),
// replica.go's ReplicaSpec nodeID, diskID and volumeName. A Longhorn node is
// named after its Kubernetes Node.
var (
	longhornNodes    = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "nodes"}
	longhornReplicas = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "replicas"}
)

// The annotations the hook keeps on the Longhorn node it evacuates: which
// machine asked, when, and whether the node allowed scheduling before, so the
// timeout survives a controller restart and Restore gives back exactly what
// it took.
const (
	EvacuationMachineAnnotation         = "ichor.maesh.dev/evacuation-machine"
	EvacuationStartedAnnotation         = "ichor.maesh.dev/evacuation-started"
	EvacuationAllowSchedulingAnnotation = "ichor.maesh.dev/evacuation-allow-scheduling"
)

// ConfigFunc returns the REST configuration of a cluster's own Kubernetes API.
type ConfigFunc func(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (*rest.Config, error)

// Longhorn is the storage hook of the longhorn presets (architecture,
// "Storage"). For a machine a longhorn-v1 or longhorn-v2 TalosStorage selects
// (with spec.evacuation not false) it sets the machine's Longhorn node
// spec.allowScheduling false, and only then spec.evictionRequested true
// (Longhorn evicts only where scheduling is disabled); it is done when no
// replicas.longhorn.io object names the node (storage.EvacuationStatus), and
// pauses, a *PausedError, at the TalosStorage's evacuationTimeout. Restore
// gives the node back its scheduling. Both data engines share Longhorn's
// node and replica objects.
type Longhorn struct {
	// Client reads TalosStorages, TalosClusters and TalosMachines (the cache).
	Client client.Reader
	// APIReader reads the secrets bundle.
	APIReader client.Reader
	// Nodes dials control planes for the admin kubeconfig; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Config reaches the cluster's Kubernetes API; nil means through a
	// control plane's admin kubeconfig (workload.Config).
	Config ConfigFunc
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock
}

var (
	_ Storage  = (*Longhorn)(nil)
	_ Restorer = (*Longhorn)(nil)
)

// isLonghorn reports whether a preset is Longhorn's.
func isLonghorn(preset string) bool {
	return preset == ichorv1alpha1.StoragePresetLonghornV1 || preset == ichorv1alpha1.StoragePresetLonghornV2
}

// storages returns the names of the longhorn TalosStorages that select m and,
// of those that evacuate, the shortest timeout; evacuate is false when none does.
func (l *Longhorn) storages(ctx context.Context, m *ichorv1alpha1.TalosMachine) (names []string, timeout time.Duration, evacuate bool, err error) {
	var list ichorv1alpha1.TalosStorageList
	if err := l.Client.List(ctx, &list, client.InNamespace(m.Namespace)); err != nil {
		return nil, 0, false, fmt.Errorf("listing TalosStorages in %s: %w", m.Namespace, err)
	}

	for i := range list.Items {
		s := &list.Items[i]

		ok, err := render.StorageSelects(s, m)
		if err != nil {
			return nil, 0, false, err
		}

		if !ok || !isLonghorn(s.Spec.Preset) {
			continue
		}

		names = append(names, s.Name)

		if s.Spec.Evacuation != nil && !*s.Spec.Evacuation {
			continue
		}

		t := storage.DefaultEvacuationTimeout
		if s.Spec.EvacuationTimeout != nil && s.Spec.EvacuationTimeout.Duration > 0 {
			t = s.Spec.EvacuationTimeout.Duration
		}

		if !evacuate || t < timeout {
			timeout = t
		}

		evacuate = true
	}

	slices.Sort(names)

	return names, timeout, evacuate, nil
}

// target is the machine's node as Longhorn sees it.
type target struct {
	dyn  dynamic.Interface
	node string
	// obj is the Longhorn node; nil when Longhorn is not installed or has no node of that name.
	obj *unstructured.Unstructured
}

func (l *Longhorn) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}

	return l.Clock.Now()
}

// reach finds m's Longhorn node through the cluster's Kubernetes API.
func (l *Longhorn) reach(ctx context.Context, m *ichorv1alpha1.TalosMachine) (*target, error) {
	cl := &ichorv1alpha1.TalosCluster{}
	if err := l.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, cl); err != nil {
		return nil, fmt.Errorf("reading TalosCluster %s: %w", m.Spec.ClusterName, err)
	}

	b, err := machinestate.LoadBundle(ctx, l.APIReader, cl)
	if err != nil {
		return nil, err
	}

	cfg, err := l.config(ctx, cl, b)
	if err != nil {
		return nil, err
	}

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}

	t := &target{dyn: dyn, node: m.Status.NodeName}

	if t.node == "" {
		k, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}

		n, err := workload.NodeAt(ctx, k, m.Status.NodeName, m.Spec.Address)
		if err != nil {
			return nil, err
		}

		if n == nil {
			return t, nil
		}

		t.node = n.Name
	}

	list, err := dyn.Resource(longhornNodes).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + t.node})
	if apierrors.IsNotFound(err) {
		return t, nil // Longhorn's CRDs are not installed: nothing can live on the node
	}

	if err != nil {
		return nil, fmt.Errorf("reading Longhorn's node %s: %w", t.node, err)
	}

	if len(list.Items) > 0 {
		t.obj = &list.Items[0]
	}

	return t, nil
}

func (l *Longhorn) config(ctx context.Context, cl *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (*rest.Config, error) {
	if l.Config != nil {
		return l.Config(ctx, cl, b)
	}

	cps, err := machinestate.Machines(ctx, l.Client, cl.Namespace, cl.Name, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Address != "" && m.Status.ConfigSentAt != nil && m.DeletionTimestamp == nil
	})
	if err != nil {
		return nil, err
	}

	nodes := l.Nodes
	if nodes == nil {
		nodes = &talos.Dialer{}
	}

	return workload.Config(ctx, nodes, cl.Name, cps, b)
}

// Evacuate runs one step of the evacuation of m's Longhorn node: request it
// (scheduling off first, then eviction), then decide from the replicas that
// still name the node.
func (l *Longhorn) Evacuate(ctx context.Context, m *ichorv1alpha1.TalosMachine) (bool, string, error) {
	names, timeout, evacuate, err := l.storages(ctx, m)
	if err != nil {
		return false, "", err
	}

	if !evacuate {
		return true, "", nil
	}

	t, err := l.reach(ctx, m)
	if err != nil {
		return false, fmt.Sprintf("cannot reach the cluster's Kubernetes API to evacuate Longhorn from %s (TalosStorage %s): %v", m.Name, strings.Join(names, ", "), err), nil
	}

	switch {
	case t.node == "":
		return true, "no Kubernetes Node has the machine's address: Longhorn has nothing there to evacuate", nil
	case t.obj == nil:
		return true, "Longhorn has no node " + t.node + ": nothing to evacuate", nil
	}

	started, err := l.request(ctx, t, m)
	if err != nil {
		return false, "", err
	}

	list, err := t.dyn.Resource(longhornReplicas).Namespace(t.obj.GetNamespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "", fmt.Errorf("listing Longhorn's replicas: %w", err)
	}

	replicas := make([]storage.Replica, 0, len(list.Items))

	for _, r := range list.Items {
		node, _, _ := unstructured.NestedString(r.Object, "spec", "nodeID")
		disk, _, _ := unstructured.NestedString(r.Object, "spec", "diskID")
		vol, _, _ := unstructured.NestedString(r.Object, "spec", "volumeName")
		replicas = append(replicas, storage.Replica{Name: r.GetName(), Volume: vol, Node: node, Disk: disk})
	}

	st := storage.EvacuationStatus(storage.Target{Node: t.node}, replicas, started, l.now(), timeout)

	switch st.Phase {
	case storage.EvacuationDone:
		return true, "Longhorn: " + st.Message, nil
	case storage.EvacuationPaused:
		return false, st.Message, &PausedError{Message: "Longhorn: " + st.Message + fmt.Sprintf(
			"; the operation waits and never drains a node with replicas still on it: it goes on by itself once they are gone, "+
				"or raise spec.evacuationTimeout of TalosStorage %s", strings.Join(names, ", "))}
	default:
		return false, "Longhorn: " + st.Message, nil
	}
}

// request disables scheduling on the Longhorn node and then requests its
// eviction, each in its own write, and returns when the evacuation started.
// An evacuation continues while the node still carries this machine's
// annotations and scheduling stays off; otherwise it starts again now.
func (l *Longhorn) request(ctx context.Context, t *target, m *ichorv1alpha1.TalosMachine) (time.Time, error) {
	nodes := t.dyn.Resource(longhornNodes).Namespace(t.obj.GetNamespace())
	obj := t.obj.DeepCopy()
	ann := obj.GetAnnotations()

	allow, _, _ := unstructured.NestedBool(obj.Object, "spec", "allowScheduling")
	started, perr := time.Parse(time.RFC3339, ann[EvacuationStartedAnnotation])

	if ann[EvacuationMachineAnnotation] != string(m.UID) || perr != nil || allow {
		prev := strconv.FormatBool(allow)
		if !allow && ann[EvacuationAllowSchedulingAnnotation] != "" {
			prev = ann[EvacuationAllowSchedulingAnnotation] // an earlier evacuation's record of the node's own setting
		}

		if ann == nil {
			ann = map[string]string{}
		}

		started = l.now().UTC().Truncate(time.Second)
		ann[EvacuationMachineAnnotation] = string(m.UID)
		ann[EvacuationStartedAnnotation] = started.Format(time.RFC3339)
		ann[EvacuationAllowSchedulingAnnotation] = prev
		obj.SetAnnotations(ann)

		if err := unstructured.SetNestedField(obj.Object, false, "spec", "allowScheduling"); err != nil {
			return started, err
		}

		updated, err := nodes.Update(ctx, obj, metav1.UpdateOptions{})
		if err != nil {
			return started, fmt.Errorf("disabling scheduling on Longhorn node %s: %w", t.node, err)
		}

		obj = updated
	}

	if evict, _, _ := unstructured.NestedBool(obj.Object, "spec", "evictionRequested"); !evict {
		if err := unstructured.SetNestedField(obj.Object, true, "spec", "evictionRequested"); err != nil {
			return started, err
		}

		if _, err := nodes.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			return started, fmt.Errorf("requesting the eviction of Longhorn node %s: %w", t.node, err)
		}
	}

	return started, nil
}

// Restore ends the evacuation of m's Longhorn node, when this hook started
// it: eviction off, scheduling back as it was before, the annotations gone.
func (l *Longhorn) Restore(ctx context.Context, m *ichorv1alpha1.TalosMachine) error {
	names, _, _, err := l.storages(ctx, m)
	if err != nil || len(names) == 0 {
		return err
	}

	t, err := l.reach(ctx, m)
	if err != nil {
		return fmt.Errorf("cannot reach the cluster's Kubernetes API to give Longhorn node of %s its scheduling back: %w", m.Name, err)
	}

	if t.obj == nil || t.obj.GetAnnotations()[EvacuationMachineAnnotation] != string(m.UID) {
		return nil
	}

	obj := t.obj.DeepCopy()
	ann := obj.GetAnnotations()
	allow := ann[EvacuationAllowSchedulingAnnotation] != "false"

	delete(ann, EvacuationMachineAnnotation)
	delete(ann, EvacuationStartedAnnotation)
	delete(ann, EvacuationAllowSchedulingAnnotation)
	obj.SetAnnotations(ann)

	if err := unstructured.SetNestedField(obj.Object, false, "spec", "evictionRequested"); err != nil {
		return err
	}

	if err := unstructured.SetNestedField(obj.Object, allow, "spec", "allowScheduling"); err != nil {
		return err
	}

	if _, err := t.dyn.Resource(longhornNodes).Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("giving Longhorn node %s its scheduling back: %w", t.node, err)
	}

	return nil
}
