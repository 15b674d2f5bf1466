package guard

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Small clusters (architecture, "Topology", last paragraph): "single-node
// upgrades can't drain anywhere, so the UI says there will be downtime and
// asks; a missing backup configuration is a warning; three-node clusters
// without workers get a capacity check before each drain."
//
//   - Downtime: a Talos upgrade, a reboot or a shutdown of the only node of
//     a cluster stops everything on it. The CLI and the console say so and
//     ask; the consent is AcceptDowntimeAnnotation on the write, which the
//     webhook requires (CheckOperationDowntime, CheckClusterDowntime).
//   - Backups: BackupWarnings warns (never refuses) before a disruptive
//     operation when the cluster has no TalosEtcdBackup, or none with a
//     verified snapshot within MaxBackupAge.
//   - Capacity: on three control planes and no worker, CheckDrainCapacity
//     says whether what runs on the node to be drained fits on the other two.

// annotationTrue is the value of a yes/no consent annotation.
const annotationTrue = "true"

// MaxBackupAge is how old the last verified snapshot of a cluster may be
// before a disruptive operation warns that there is no recent backup.
const MaxBackupAge = 48 * time.Hour

// fieldAcceptDowntime is the annotation as a field path, for refusals.
const fieldAcceptDowntime = "metadata.annotations[" + ichorv1alpha1.AcceptDowntimeAnnotation + "]"

// SingleNode reports whether a cluster with these approved machines has one
// node only: nothing it runs can move elsewhere while that node is down.
func SingleNode(n ApprovedCounts) bool {
	return n.ControlPlanes+n.Workers == 1
}

// singleNodeText is the downtime notice, shared by the operation and the
// cluster write, so that the CLI, the console and the webhook say the same.
func singleNodeText(cluster, what string) string {
	return fmt.Sprintf("cluster %s has a single node: %s stops etcd, the Kubernetes API and every workload until the node is back "+
		"(there is no other node to drain to)", cluster, what)
}

// OperationDowntime returns the downtime notice of op when it reboots or
// shuts down the only node of its cluster (n counts every approved machine
// of the cluster); "" otherwise. A reset of the only node is refused on its
// own (CheckNodeAction); a cluster shutdown is planned downtime and its typed
// name is the consent already.
func OperationDowntime(op *ichorv1alpha1.TalosOperation, n ApprovedCounts) string {
	if op.Spec.Type != ichorv1alpha1.OperationNode || op.Spec.Node == nil || !SingleNode(n) {
		return ""
	}
	switch op.Spec.Node.Action {
	case ichorv1alpha1.NodeActionReboot:
		return singleNodeText(op.Spec.ClusterName, "rebooting "+op.Spec.Node.MachineName)
	case ichorv1alpha1.NodeActionShutdown:
		return singleNodeText(op.Spec.ClusterName, "shutting "+op.Spec.Node.MachineName+" down")
	}
	return ""
}

// CheckOperationDowntime refuses an operation with downtime (OperationDowntime)
// that does not carry the consent: AcceptDowntimeAnnotation "true".
func CheckOperationDowntime(op *ichorv1alpha1.TalosOperation, n ApprovedCounts) *Refusal {
	notice := OperationDowntime(op, n)
	if notice == "" || op.Annotations[ichorv1alpha1.AcceptDowntimeAnnotation] == annotationTrue {
		return nil
	}
	return &Refusal{
		Field: fieldAcceptDowntime,
		Rule:  notice + ", and the write does not say that this downtime was accepted",
		WayOut: fmt.Sprintf("confirm the downtime: `ichor node %s %s` asks for it, the console's dialog too; "+
			"or set the annotation %s: \"true\" on the operation", op.Spec.Node.Action, op.Spec.Node.MachineName, ichorv1alpha1.AcceptDowntimeAnnotation),
	}
}

// ClusterDowntime returns the downtime notice of a TalosCluster write that
// changes spec.talosVersion (a Talos upgrade reboots every machine) on a
// cluster with a single node; "" otherwise. old is nil on create.
func ClusterDowntime(old, c *ichorv1alpha1.TalosCluster, n ApprovedCounts) string {
	if old == nil || old.Spec.TalosVersion == c.Spec.TalosVersion || !SingleNode(n) {
		return ""
	}
	return singleNodeText(c.Name, fmt.Sprintf("upgrading Talos to %s reboots the node, which", c.Spec.TalosVersion))
}

// CheckClusterDowntime refuses a Talos upgrade of a single-node cluster
// (ClusterDowntime) whose write does not carry the consent: the annotation
// AcceptDowntimeAnnotation set to the new version.
func CheckClusterDowntime(old, c *ichorv1alpha1.TalosCluster, n ApprovedCounts) *Refusal {
	notice := ClusterDowntime(old, c, n)
	if notice == "" || c.Annotations[ichorv1alpha1.AcceptDowntimeAnnotation] == c.Spec.TalosVersion {
		return nil
	}
	return &Refusal{
		Field: "spec.talosVersion",
		Rule:  notice + ", and the write does not say that this downtime was accepted",
		WayOut: fmt.Sprintf("confirm the downtime: `ichor upgrade talos %s` asks for it, the console's upgrade dialog too; "+
			"or set the annotation %s: %q on the same write", c.Spec.TalosVersion, ichorv1alpha1.AcceptDowntimeAnnotation, c.Spec.TalosVersion),
	}
}

// BackupWarnings returns the warnings of a disruptive operation on cluster
// about its etcd backups (backups are the namespace's TalosEtcdBackups): none
// configured, or none with a verified snapshot within MaxBackupAge of now.
// A warning, never a refusal (architecture, "Topology").
func BackupWarnings(cluster string, backups []ichorv1alpha1.TalosEtcdBackup, now time.Time) []string {
	var newest *time.Time
	configured := 0
	for i := range backups {
		b := &backups[i]
		if b.Spec.ClusterName != cluster || b.DeletionTimestamp != nil {
			continue
		}
		configured++
		if t := b.Status.LastSuccessfulTime; t != nil && (newest == nil || t.After(*newest)) {
			newest = &t.Time
		}
	}
	switch {
	case configured == 0:
		return []string{fmt.Sprintf("cluster %s has no etcd backup configured: if this goes wrong there is no snapshot to restore; "+
			"create a TalosEtcdBackup for it first (kubectl apply; see Backups in the console)", cluster)}
	case newest == nil:
		return []string{fmt.Sprintf("cluster %s has no verified etcd snapshot yet: take one first (`ichor etcd backup now`, or Back up now in the console)", cluster)}
	case now.Sub(*newest) > MaxBackupAge:
		return []string{fmt.Sprintf("the last verified etcd snapshot of cluster %s is from %s, more than %s ago: take one first "+
			"(`ichor etcd backup now`, or Back up now in the console)", cluster, newest.UTC().Format(time.RFC3339), MaxBackupAge)}
	}
	return nil
}

// Disruptive reports whether op stops or restarts nodes: a Talos upgrade, a
// node reboot, shutdown or reset, a cluster shutdown or an etcd restore.
func Disruptive(op *ichorv1alpha1.TalosOperation) bool {
	switch op.Spec.Type {
	case ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationNode, ichorv1alpha1.OperationShutdown, ichorv1alpha1.OperationEtcdRestore:
		return true
	}
	return false
}

// OperationWarnings returns what does not refuse op but a person should know
// before it starts: the backup warnings of a disruptive operation, and on a
// three-node cluster without workers, a drain whose pods may not fit
// elsewhere (facts.Capacity, when it was read).
func OperationWarnings(op *ichorv1alpha1.TalosOperation, facts OperationFacts, now time.Time) []string {
	if !Disruptive(op) {
		return nil
	}
	var out []string
	if !facts.BackupsUnknown {
		out = BackupWarnings(op.Spec.ClusterName, facts.Backups, now)
	}
	// Every node action drains the node first (nodeop.NodeSteps).
	if facts.Machine != nil && CapacityChecked(facts.Approved) && op.Spec.Type == ichorv1alpha1.OperationNode && op.Spec.Node != nil {
		if r := CheckDrainCapacity(facts.Capacity, facts.Machine.Status.NodeName); r != nil {
			out = append(out, r.Error())
		}
	}
	return out
}

// CapacityChecked reports whether a cluster gets the capacity check before
// each drain: three control planes and no worker, where every drain moves
// the workloads onto the two remaining nodes.
func CapacityChecked(n ApprovedCounts) bool {
	return n.ControlPlanes == 3 && n.Workers == 0
}

// NodeLoad is what the capacity check reads of one Kubernetes Node: what it
// offers to pods and what the pods on it request.
type NodeLoad struct {
	// Name is the Node's name.
	Name string
	// Schedulable is false for a cordoned Node (spec.unschedulable).
	Schedulable bool
	// AllocatableMilliCPU and AllocatableMemory are status.allocatable.
	AllocatableMilliCPU, AllocatableMemory int64
	// RequestedMilliCPU and RequestedMemory sum the requests of the pods on
	// the Node that are not finished.
	RequestedMilliCPU, RequestedMemory int64
	// MovableMilliCPU and MovableMemory sum the requests of the pods a drain
	// evicts (not DaemonSet or mirror pods), which must fit elsewhere.
	MovableMilliCPU, MovableMemory int64
}

// CheckDrainCapacity checks, before node draining is drained, that the pods
// a drain evicts from it fit in what the other schedulable Nodes have left
// (allocatable minus requested), CPU and memory each. It refuses, overridably,
// when they do not: the evicted pods would stay Pending. nil when the Node is
// not among loads (nothing is known of it).
func CheckDrainCapacity(loads []NodeLoad, draining string) *Refusal {
	var node *NodeLoad
	var freeCPU, freeMem int64
	for i := range loads {
		l := &loads[i]
		if l.Name == draining {
			node = l
			continue
		}
		if !l.Schedulable {
			continue
		}
		freeCPU += max(0, l.AllocatableMilliCPU-l.RequestedMilliCPU)
		freeMem += max(0, l.AllocatableMemory-l.RequestedMemory)
	}
	if node == nil || node.MovableMilliCPU <= freeCPU && node.MovableMemory <= freeMem {
		return nil
	}
	return &Refusal{
		Field: fieldNodeMachine,
		Rule: fmt.Sprintf("the pods a drain evicts from node %s request %dm CPU and %d MiB of memory, but the other nodes have %dm CPU and %d MiB free: "+
			"some would stay Pending until the node is back", draining, node.MovableMilliCPU, node.MovableMemory>>20, freeCPU, freeMem>>20),
		WayOut:      "scale workloads down or add a worker first, or go ahead knowing that they wait (hold the `override` verb on the cluster)",
		Overridable: true,
	}
}

// LoadNodeLoads reads every Node and the pods on them for CheckDrainCapacity.
// A reader that may not list Nodes or Pods gets nil and no error: the check
// is then not made.
func LoadNodeLoads(ctx context.Context, r client.Reader) ([]NodeLoad, error) {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing Pods: %w", err)
	}
	return NodeLoadsOf(nodes.Items, pods.Items), nil
}

// NodeLoadsOf is what CheckDrainCapacity reads of these Nodes and the pods
// on them: pods on no listed Node and finished pods count nowhere.
func NodeLoadsOf(nodes []corev1.Node, pods []corev1.Pod) []NodeLoad {
	byName := make(map[string]*NodeLoad, len(nodes))
	out := make([]NodeLoad, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		out[i] = NodeLoad{
			Name: n.Name, Schedulable: !n.Spec.Unschedulable,
			AllocatableMilliCPU: n.Status.Allocatable.Cpu().MilliValue(), AllocatableMemory: n.Status.Allocatable.Memory().Value(),
		}
		byName[n.Name] = &out[i]
	}
	for i := range pods {
		p := &pods[i]
		l := byName[p.Spec.NodeName]
		if l == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var cpu, mem int64
		for _, c := range p.Spec.Containers {
			cpu += c.Resources.Requests.Cpu().MilliValue()
			mem += c.Resources.Requests.Memory().Value()
		}
		l.RequestedMilliCPU += cpu
		l.RequestedMemory += mem
		if !daemonOrMirror(p) {
			l.MovableMilliCPU += cpu
			l.MovableMemory += mem
		}
	}
	return out
}

// daemonOrMirror reports whether a drain leaves p where it is: a DaemonSet's
// pod or a static (mirror) pod.
func daemonOrMirror(p *corev1.Pod) bool {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// loadSmallClusterFacts adds to facts every approved machine of the cluster,
// its TalosEtcdBackups, and on a three-node cluster without workers the Node
// loads. A reader that may not list the backups leaves facts.Backups nil and
// facts.BackupsUnknown true.
func loadSmallClusterFacts(ctx context.Context, r client.Reader, op *ichorv1alpha1.TalosOperation, facts *OperationFacts) error {
	n, err := CountApproved(ctx, r, op.Namespace, op.Spec.ClusterName, "")
	if err != nil {
		return err
	}
	facts.Approved = n
	if !Disruptive(op) {
		return nil
	}
	var list ichorv1alpha1.TalosEtcdBackupList
	switch err := r.List(ctx, &list, client.InNamespace(op.Namespace)); {
	case apierrors.IsForbidden(err):
		facts.BackupsUnknown = true
	case err != nil:
		return fmt.Errorf("listing TalosEtcdBackups in %s: %w", op.Namespace, err)
	default:
		facts.Backups = list.Items
	}
	if CapacityChecked(n) && op.Spec.Type == ichorv1alpha1.OperationNode {
		loads, err := LoadNodeLoads(ctx, r)
		if err != nil {
			return err
		}
		facts.Capacity = loads
	}
	return nil
}

// TalosUpgradeNotices reads what a Talos upgrade of c to target says before
// it starts (the CLI's confirmation, the console's dialog): the downtime
// notice of a single node ("" otherwise; the write then needs
// AcceptDowntime) and the backup warnings.
func TalosUpgradeNotices(ctx context.Context, r client.Reader, c *ichorv1alpha1.TalosCluster, target string, now time.Time) (string, []string, error) {
	n, err := CountApproved(ctx, r, c.Namespace, c.Name, "")
	if err != nil {
		return "", nil, err
	}
	next := c.DeepCopy()
	next.Spec.TalosVersion = target
	downtime := ClusterDowntime(c, next, n)
	var list ichorv1alpha1.TalosEtcdBackupList
	switch err := r.List(ctx, &list, client.InNamespace(c.Namespace)); {
	case apierrors.IsForbidden(err):
		return downtime, nil, nil
	case err != nil:
		return "", nil, fmt.Errorf("listing TalosEtcdBackups in %s: %w", c.Namespace, err)
	}
	return downtime, BackupWarnings(c.Name, list.Items, now), nil
}

// AcceptDowntime records a person's consent to the downtime on obj, the
// write the webhook checks: value is "true" on a TalosOperation, the new
// Talos version on a TalosCluster.
func AcceptDowntime(obj client.Object, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[ichorv1alpha1.AcceptDowntimeAnnotation] = value
	obj.SetAnnotations(a)
}
