package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
)

// Label names shared by the metrics.
const (
	labelNamespace = "namespace"
	labelCluster   = "cluster"
	labelType      = "type"
)

// Machine phases, the values of ichor_machines' phase label: where a
// TalosMachine is in its life, from its approval and conditions.
const (
	PhasePending      = "Pending"
	PhaseRejected     = "Rejected"
	PhaseProvisioning = "Provisioning"
	PhaseReady        = "Ready"
	PhaseNotReady     = "NotReady"
	PhaseRemoving     = "Removing"
)

// Phases are the machine phases in the order a machine goes through them.
var Phases = []string{PhasePending, PhaseRejected, PhaseProvisioning, PhaseReady, PhaseNotReady, PhaseRemoving}

// roleNone is the role label of a machine that has none yet (pending approval).
const roleNone = "none"

var roles = []string{ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker, roleNone}

// operationPhases are the values of ichor_operations' phase label.
var operationPhases = []string{
	ichorv1alpha1.OperationPending, ichorv1alpha1.OperationRunning, ichorv1alpha1.OperationPaused,
	ichorv1alpha1.OperationAwaitingCredentials, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.OperationFailed,
}

var discoveryResults = []string{
	ichorv1alpha1.DiscoveryResultPending, ichorv1alpha1.DiscoveryResultKnown, ichorv1alpha1.DiscoveryResultAlreadyConfigured,
	ichorv1alpha1.DiscoveryResultUnreachable, ichorv1alpha1.DiscoveryResultConflict,
}

// Certificate authorities, the values of the ca label.
const (
	CATalos      = "talos"
	CAKubernetes = "kubernetes"
	CAEtcd       = "etcd"
	CAAggregator = "aggregator"
)

var (
	machinesDesc = prometheus.NewDesc("ichor_machines",
		"TalosMachines by cluster, role (controlplane, worker, none before approval) and phase (Pending, Rejected, Provisioning, Ready, NotReady, Removing).",
		[]string{labelNamespace, labelCluster, "role", "phase"}, nil)
	machineReadyDesc = prometheus.NewDesc("ichor_machine_ready",
		"1 when an approved TalosMachine's Ready condition is True, else 0; by machine name.",
		[]string{labelNamespace, labelCluster, "machine", "role"}, nil)
	driftedDesc = prometheus.NewDesc("ichor_machines_drifted",
		"Approved TalosMachines of the cluster whose Drifted condition is True (the node's configuration differs from the rendered one).",
		[]string{labelNamespace, labelCluster}, nil)
	rebootRequiredDesc = prometheus.NewDesc("ichor_machines_reboot_required",
		"Approved TalosMachines of the cluster whose RebootRequired condition is True (a change waits for a config rollout).",
		[]string{labelNamespace, labelCluster}, nil)
	operationsDesc = prometheus.NewDesc("ichor_operations",
		"TalosOperations by cluster, type and phase (Pending, Running, Paused, AwaitingCredentials, Succeeded, Failed).",
		[]string{labelNamespace, labelCluster, labelType, "phase"}, nil)
	operationPausedDesc = prometheus.NewDesc("ichor_operation_paused",
		"1 for each paused TalosOperation, by name; cause is failure (it stopped on a failed step: status.failureReason) or person (spec.paused).",
		[]string{labelNamespace, labelCluster, "operation", labelType, "cause"}, nil)
	lockHolderDesc = prometheus.NewDesc("ichor_cluster_lock_holder",
		"1 for the holder of a cluster's lock Lease: kind (op, machine, cni-helm, other) and the holding object's name; no series while nobody holds it.",
		[]string{labelNamespace, labelCluster, "kind", "holder"}, nil)
	certNotAfterDesc = prometheus.NewDesc("ichor_certificate_not_after_timestamp_seconds",
		"Unix time at which a cluster's certificate authority expires (talos, kubernetes, etcd, aggregator), from its secrets bundle (status.certificates).",
		[]string{labelNamespace, labelCluster, "ca"}, nil)
	discoveryAddressesDesc = prometheus.NewDesc("ichor_discovery_addresses",
		"Addresses the last discovery scan of a cluster found, by result (Pending, Known, AlreadyConfigured, Unreachable, Conflict).",
		[]string{labelNamespace, labelCluster, "result"}, nil)
	discoveryLastScanDesc = prometheus.NewDesc("ichor_discovery_last_scan_timestamp_seconds",
		"Unix time of the last discovery scan of a cluster.",
		[]string{labelNamespace, labelCluster}, nil)
	collectErrorsDesc = prometheus.NewDesc("ichor_metrics_collect_errors",
		"1 when the last scrape could not list a kind from the cache (its metrics are missing from that scrape), else 0.",
		[]string{"kind"}, nil)
)

// Collector computes the object metrics at scrape time from a reader (the
// manager's cache), so that they are right after a restart.
type Collector struct {
	// Reader lists the objects; the manager's cache.
	Reader client.Reader
	// LockNamespace holds the lock Leases; empty means lock.DefaultNamespace.
	LockNamespace string
	// Timeout bounds one scrape's lists; zero means 10 s.
	Timeout time.Duration
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		machinesDesc, machineReadyDesc, driftedDesc, rebootRequiredDesc, operationsDesc, operationPausedDesc,
		lockHolderDesc, certNotAfterDesc, discoveryAddressesDesc, discoveryLastScanDesc, collectErrorsDesc,
	} {
		ch <- d
	}
}

// Collect lists the objects and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	failed := func(kind string, err error) {
		v := 0.0
		if err != nil {
			v = 1
		}

		ch <- prometheus.MustNewConstMetric(collectErrorsDesc, prometheus.GaugeValue, v, kind)
	}

	var clusters ichorv1alpha1.TalosClusterList

	err := c.Reader.List(ctx, &clusters)
	failed("TalosCluster", err)

	if err == nil {
		for i := range clusters.Items {
			collectCluster(ch, &clusters.Items[i])
		}
	}

	var machines ichorv1alpha1.TalosMachineList

	err = c.Reader.List(ctx, &machines)
	failed("TalosMachine", err)

	if err == nil {
		collectMachines(ch, clusters.Items, machines.Items)
	}

	var ops ichorv1alpha1.TalosOperationList

	err = c.Reader.List(ctx, &ops)
	failed("TalosOperation", err)

	if err == nil {
		collectOperations(ch, ops.Items)
	}

	ns := c.LockNamespace
	if ns == "" {
		ns = lock.DefaultNamespace
	}

	var leases coordinationv1.LeaseList

	err = c.Reader.List(ctx, &leases, client.InNamespace(ns), client.HasLabels{lock.LabelCluster})
	failed("Lease", err)

	if err == nil {
		collectLocks(ch, leases.Items)
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func collectCluster(ch chan<- prometheus.Metric, c *ichorv1alpha1.TalosCluster) {
	certs := c.Status.Certificates
	for _, ca := range []struct {
		name string
		t    *metav1.Time
	}{
		{CATalos, certs.TalosCAExpiry}, {CAKubernetes, certs.KubernetesCAExpiry}, {CAEtcd, certs.EtcdCAExpiry},
		{CAAggregator, certs.AggregatorCAExpiry},
	} {
		if ca.t != nil {
			gauge(ch, certNotAfterDesc, float64(ca.t.Unix()), c.Namespace, c.Name, ca.name)
		}
	}

	d := c.Status.Discovery
	if d.LastScanTime == nil {
		return
	}

	gauge(ch, discoveryLastScanDesc, float64(d.LastScanTime.Unix()), c.Namespace, c.Name)

	counts := map[string]int{}
	for _, a := range d.Addresses {
		counts[a.Result]++
	}

	for _, r := range discoveryResults {
		gauge(ch, discoveryAddressesDesc, float64(counts[r]), c.Namespace, c.Name, r)
	}
}

// MachinePhase is where a machine is in its life: Pending or Rejected
// (approval), Removing (being deleted or removed), Provisioning (approved,
// not yet Provisioned), then Ready or NotReady (its Ready condition).
func MachinePhase(m *ichorv1alpha1.TalosMachine) string {
	switch {
	case m.DeletionTimestamp != nil || m.Status.Removal != nil:
		return PhaseRemoving
	case m.Spec.Approval.State == ichorv1alpha1.ApprovalRejected:
		return PhaseRejected
	case m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved:
		return PhasePending
	case !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition):
		return PhaseProvisioning
	case apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition):
		return PhaseReady
	default:
		return PhaseNotReady
	}
}

type clusterKey struct{ namespace, name string }

func collectMachines(ch chan<- prometheus.Metric, clusters []ichorv1alpha1.TalosCluster, machines []ichorv1alpha1.TalosMachine) {
	type counts struct {
		phases                  map[[2]string]int
		drifted, rebootRequired int
	}

	byCluster := map[clusterKey]*counts{}
	get := func(k clusterKey) *counts {
		if byCluster[k] == nil {
			byCluster[k] = &counts{phases: map[[2]string]int{}}
		}

		return byCluster[k]
	}

	// Every cluster has its full set of series, zero when it has no machine.
	for i := range clusters {
		get(clusterKey{clusters[i].Namespace, clusters[i].Name})
	}

	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName == "" {
			continue
		}

		k := clusterKey{m.Namespace, m.Spec.ClusterName}
		cnt := get(k)

		role := m.Spec.Role
		if role == "" {
			role = roleNone
		}

		cnt.phases[[2]string{role, MachinePhase(m)}]++

		if m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved {
			continue
		}

		ready := 0.0
		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			ready = 1
		}

		gauge(ch, machineReadyDesc, ready, m.Namespace, m.Spec.ClusterName, m.Name, role)

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.DriftedCondition) {
			cnt.drifted++
		}

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.RebootRequiredCondition) {
			cnt.rebootRequired++
		}
	}

	for k, cnt := range byCluster {
		for _, role := range roles {
			for _, phase := range Phases {
				gauge(ch, machinesDesc, float64(cnt.phases[[2]string{role, phase}]), k.namespace, k.name, role, phase)
			}
		}

		gauge(ch, driftedDesc, float64(cnt.drifted), k.namespace, k.name)
		gauge(ch, rebootRequiredDesc, float64(cnt.rebootRequired), k.namespace, k.name)
	}
}

// Causes of a paused operation.
const (
	CauseFailure = "failure"
	CausePerson  = "person"
)

func collectOperations(ch chan<- prometheus.Metric, ops []ichorv1alpha1.TalosOperation) {
	type key struct{ namespace, cluster, typ, phase string }

	counts := map[key]int{}
	seen := map[[3]string]bool{}

	for i := range ops {
		op := &ops[i]
		seen[[3]string{op.Namespace, op.Spec.ClusterName, op.Spec.Type}] = true

		phase := op.Status.Phase
		if phase == "" {
			phase = ichorv1alpha1.OperationPending
		}

		counts[key{op.Namespace, op.Spec.ClusterName, op.Spec.Type, phase}]++

		if phase == ichorv1alpha1.OperationPaused {
			cause := CausePerson
			if op.Status.FailureReason != "" || op.Status.FailedStep != "" {
				cause = CauseFailure
			}

			gauge(ch, operationPausedDesc, 1, op.Namespace, op.Spec.ClusterName, op.Name, op.Spec.Type, cause)
		}
	}

	// Each cluster and type seen has every phase, zero or not.
	for s := range seen {
		for _, phase := range operationPhases {
			gauge(ch, operationsDesc, float64(counts[key{s[0], s[1], s[2], phase}]), s[0], s[1], s[2], phase)
		}
	}
}

// Kind of a lock holder that is not one of Ichor's identities.
const holderOther = "other"

func collectLocks(ch chan<- prometheus.Metric, leases []coordinationv1.Lease) {
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue
		}

		kind, obj, ok := lock.ParseIdentity(*l.Spec.HolderIdentity)
		holder := obj.Name

		switch {
		case !ok:
			kind, holder = holderOther, ""
		case kind == lock.KindCNIHelm:
			holder = "cilium"
		}

		gauge(ch, lockHolderDesc, 1, l.Labels[lock.LabelClusterNamespace], l.Labels[lock.LabelCluster], kind, holder)
	}
}
