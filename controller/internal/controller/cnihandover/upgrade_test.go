package cnihandover_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/cnijob"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestCiliumUpgradeChaos runs a cni operation (Cilium chart bootChart to
// upgradeChart) with the operation controller killed after every reconcile
// (each reconcile is a new controller process, as after a crash), on the
// cluster TestHandover handed over:
//
//  1. the operation checks the chart Helm's record says runs, then starts
//     one ichor-cni Job labelled with it, carrying the target chart and the
//     cluster's values; restarted controllers find that Job instead of
//     starting another;
//  2. kwok "completes" the Job without a Helm run: the operation does not
//     take the Job's word; it pauses on cni-apply with what Helm's record
//     says (still bootChart) and the way to resume;
//  3. the release upgraded as the Job would (cilium.Apply with the Job's
//     request) and the operation resumed: a second Job (one per resume),
//     then Succeeded with Helm's record at upgradeChart, its Job removed and
//     the cluster lock given back.
func TestCiliumUpgradeChaos(t *testing.T) {
	ctx := t.Context()
	cfg, k := adminConfig(t)

	testenv.EventuallyOK(t, waitTimeout, "Cilium handed over at "+bootChart, func() (bool, string) {
		d, err := cilium.Deployed(ctx, cfg)
		if err != nil || d == nil {
			return false, fmt.Sprintf("%+v %v", d, err)
		}

		cond := apimeta.FindStatusCondition(cluster(t).Status.Conditions, ichorv1alpha1.CNIHandoverCondition)

		return cond != nil && cond.Status == metav1.ConditionTrue && d.Status == "deployed" && d.Version == bootChart, fmt.Sprintf("%+v, %+v", d, cond)
	})

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cni-upgrade"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: clusterName, Type: ichorv1alpha1.OperationCNI, CNI: &ichorv1alpha1.CNIUpgrade{Version: upgradeChart},
		},
	}
	testenv.Must(t, k8s.Create(ctx, op))

	seen := map[string]bool{}

	// 1. and 2.: restarted controllers until the operation pauses.
	got := reconcileUntil(t, k, op.Name, seen, func(o *ichorv1alpha1.TalosOperation) bool { return o.Status.FailedStep != "" })
	if got.Status.FailedStep != "cni-apply" || got.Status.From != bootChart || got.Status.To != upgradeChart {
		t.Fatalf("the operation paused at %q (from %q to %q): %s", got.Status.FailedStep, got.Status.From, got.Status.To, got.Status.FailureReason)
	}

	for _, want := range []string{"upgrades Helm release cilium from chart " + bootChart + " to " + upgradeChart + " did not succeed", "the Job ended without error",
		"is deployed with chart " + bootChart, "ichor operation resume " + op.Name} {
		if !strings.Contains(got.Status.FailureReason, want) {
			t.Fatalf("failureReason %q does not say %q", got.Status.FailureReason, want)
		}
	}

	if len(seen) != 1 {
		t.Fatalf("restarted controllers started %d Jobs for one run: %v", len(seen), seen)
	}

	first := onlyJob(t, k, op.Name)
	req := requestOf(t, k, first)

	if req.Version != upgradeChart || req.Choices.Nodes != 1 {
		t.Fatalf("the upgrade Job's request: %+v", req)
	}

	// 3. The release upgraded as the Job would, then a resume.
	applied := applyAsTheJob(t, k, first)
	if applied.Action != cilium.ActionUpgraded || applied.Version != upgradeChart {
		t.Fatalf("the upgrade's Helm run: %+v", applied)
	}

	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{ichorv1alpha1.ResumeAnnotation: "1"}
	testenv.Must(t, k8s.Patch(ctx, got, patch))

	done := reconcileUntil(t, k, op.Name, seen, func(o *ichorv1alpha1.TalosOperation) bool { return o.Status.Phase == ichorv1alpha1.OperationSucceeded })

	if cond := apimeta.FindStatusCondition(done.Status.Conditions, ichorv1alpha1.ReadyCondition); cond == nil ||
		!strings.Contains(cond.Message, "Cilium runs chart "+upgradeChart) {
		t.Fatalf("Ready after the upgrade: %+v", cond)
	}

	if len(seen) != 2 || seen[first.Name] != true {
		t.Fatalf("Jobs across the run: %v; want the first and one for the resume", seen)
	}

	if d, err := cilium.Deployed(ctx, cfg); err != nil || d.Version != upgradeChart || d.Status != "deployed" {
		t.Fatalf("Helm's record after the operation: %+v, %v", d, err)
	}

	testenv.EventuallyOK(t, waitTimeout, "the resumed run's Job removed, the lock free", func() (bool, string) {
		jobs, err := k.BatchV1().Jobs("kube-system").List(ctx, metav1.ListOptions{LabelSelector: cnijob.OperationLabel + "=" + op.Name})
		if err != nil {
			return false, err.Error()
		}

		var live []string

		for _, j := range jobs.Items {
			if j.DeletionTimestamp == nil {
				live = append(live, j.Name)
			}
		}

		holder, err := lock.Holder(ctx, k8s, types.NamespacedName{Namespace: ns, Name: clusterName})
		if err != nil {
			return false, err.Error()
		}

		return !slices.Contains(live, lastJob(seen, first.Name)) && holder == "", fmt.Sprintf("Jobs %v, lock holder %q", live, holder)
	})

	// The hand-over controller keeps the release as it is: its request now
	// follows the deployed chart.
	testenv.EventuallyOK(t, waitTimeout, "CNIHandover names the new chart", func() (bool, string) {
		cond := apimeta.FindStatusCondition(cluster(t).Status.Conditions, ichorv1alpha1.CNIHandoverCondition)
		if cond == nil {
			return false, "no condition"
		}

		return cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "chart "+upgradeChart), cond.Message
	})
}

// reconcileUntil reconciles the operation, each time in a new controller,
// until done holds, recording the names of the operation's Jobs in seen.
func reconcileUntil(t *testing.T, k kubernetes.Interface, name string, seen map[string]bool, done func(*ichorv1alpha1.TalosOperation) bool) *ichorv1alpha1.TalosOperation {
	t.Helper()

	var last *ichorv1alpha1.TalosOperation

	chaos := testworld.RunChaos(t, waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, name) }, func() testworld.ChaosStep {
		jobs, err := k.BatchV1().Jobs("kube-system").List(t.Context(), metav1.ListOptions{LabelSelector: cnijob.OperationLabel + "=" + name})
		testenv.Must(t, err)

		for _, j := range jobs.Items {
			seen[j.Name] = true
		}

		last = &ichorv1alpha1.TalosOperation{}
		testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, last))

		st := testworld.OperationStep(last, nil)
		st.Done, st.Failed = done(last), ""

		if ended := last.Status.Phase == ichorv1alpha1.OperationSucceeded || last.Status.Phase == ichorv1alpha1.OperationFailed; ended && !st.Done {
			st.Failed = fmt.Sprintf("the operation ended %s: %+v", last.Status.Phase, last.Status.Conditions)
		}

		return st
	})
	t.Logf("after %d controller restarts: phase %s, step %s", chaos.Deaths, last.Status.Phase, last.Status.Step)

	return last
}

// reconcileOnceInFreshController runs one reconcile of the operation in a
// new manager and operation reconciler, then stops them.
func reconcileOnceInFreshController(t *testing.T, name string) ctrl.Result {
	t.Helper()

	return testworld.ReconcileOperationOnce(t, suite.NewManager,
		&operation.Reconciler{InstallerImage: "ghcr.io/maeshinshin/ichor-installer:test"}, client.ObjectKey{Namespace: ns, Name: name})
}

// onlyJob is the operation's one Job.
func onlyJob(t *testing.T, k kubernetes.Interface, op string) *batchv1.Job {
	t.Helper()

	jobs, err := k.BatchV1().Jobs("kube-system").List(t.Context(), metav1.ListOptions{LabelSelector: cnijob.OperationLabel + "=" + op})
	testenv.Must(t, err)

	if len(jobs.Items) != 1 {
		t.Fatalf("operation %s has %d Jobs, want 1", op, len(jobs.Items))
	}

	return &jobs.Items[0]
}

// lastJob is the Job in seen other than first.
func lastJob(seen map[string]bool, first string) string {
	for n := range seen {
		if n != first {
			return n
		}
	}

	return ""
}
