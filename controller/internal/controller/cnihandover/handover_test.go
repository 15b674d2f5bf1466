package cnihandover_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestHandover follows a cluster from its bootstrap Cilium to Ichor's Helm
// release and through a values change:
//
//  1. the control plane's render carries the bootstrap Cilium, whose objects
//     the emulator created from it;
//  2. the first ichor-cni Job "completes" (kwok) without installing
//     anything: the controller does not take the Job's word, reports
//     HandoverFailed with what Helm's record says, gives the cluster lock
//     back, and runs a second attempt after its back-off;
//  3. the release applied as the Job would (cilium.Apply with the Job's
//     request, in-process): CNIHandover=True, status.cni.valuesHash is the
//     release's, the Jobs are gone, the lock is free, the render drops the
//     inline entry, and Cilium's DaemonSet was not changed;
//  4. a change of spec.cni.cilium.values starts a Job with the new values
//     while CNIHandover stays True, and once applied the hash follows.
func TestHandover(t *testing.T) {
	ctx := t.Context()
	cfg, k := adminConfig(t)

	// 1. The bootstrap Cilium.
	in := loadInput(t)
	if len(in.InlineManifests) != 1 || in.InlineManifests[0].Name != cilium.InlineManifestName {
		t.Fatalf("cp-1's render before the hand-over has inline manifests %v, want the bootstrap Cilium", names(in.InlineManifests))
	}

	var generation int64

	testenv.EventuallyOK(t, waitTimeout, "the bootstrap Cilium's DaemonSet", func() (bool, string) {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "cilium", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		generation = ds.Generation

		return true, ""
	})

	// 2. A Job that claims success without a release.
	first := waitJob(t, k, "-1")

	testenv.EventuallyOK(t, waitTimeout, "HandoverFailed after the first Job", func() (bool, string) {
		cond := apimeta.FindStatusCondition(cluster(t).Status.Conditions, ichorv1alpha1.CNIHandoverCondition)
		if cond == nil {
			return false, "no condition"
		}

		return cond.Status == metav1.ConditionFalse && cond.Reason == ichorv1alpha1.CNIHandoverFailedReason &&
			strings.Contains(cond.Message, "Helm's release record says there is no release") &&
			strings.Contains(cond.Message, "kube-system/ichor-cni-"), fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
	})

	second := waitJob(t, k, "-2")
	if second.Annotations["ichor.maesh.dev/cni-request"] != first.Annotations["ichor.maesh.dev/cni-request"] {
		t.Fatalf("the second attempt carries another request: %v vs %v", second.Annotations, first.Annotations)
	}

	if gap := second.CreationTimestamp.Sub(first.CreationTimestamp.Time); gap < firstBackoff {
		t.Fatalf("the second attempt started %s after the first, before the back-off of %s", gap, firstBackoff)
	}

	// 3. The release, applied as the Job would.
	applied := applyAsTheJob(t, k, second)
	if applied.Action != cilium.ActionAdopted {
		t.Fatalf("the first Helm run: %+v, want the bootstrap objects adopted", applied)
	}

	var c *ichorv1alpha1.TalosCluster

	testenv.EventuallyOK(t, waitTimeout, "CNIHandover=True", func() (bool, string) {
		c = cluster(t)
		cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition)

		if cond == nil {
			return false, "no condition"
		}

		return cond.Status == metav1.ConditionTrue && cond.Reason == ichorv1alpha1.CNIHandoverDoneReason, fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
	})

	if c.Status.CNI.ValuesHash != applied.ValuesSHA256 {
		t.Fatalf("status.cni.valuesHash %q, want the applied values' %q", c.Status.CNI.ValuesHash, applied.ValuesSHA256)
	}

	testenv.EventuallyOK(t, waitTimeout, "the Jobs and their requests removed, the lock free", func() (bool, string) {
		jobs, err := k.BatchV1().Jobs("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ichor-cni"})
		if err != nil {
			return false, err.Error()
		}

		cms, err := k.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ichor-cni"})
		if err != nil {
			return false, err.Error()
		}

		holder, err := lock.Holder(ctx, k8s, types.NamespacedName{Namespace: ns, Name: clusterName})
		if err != nil {
			return false, err.Error()
		}

		return len(jobs.Items) == 0 && len(cms.Items) == 0 && holder == "", fmt.Sprintf("%d Jobs, %d ConfigMaps, lock holder %q", len(jobs.Items), len(cms.Items), holder)
	})

	if in := loadInput(t); len(in.InlineManifests) != 0 {
		t.Fatalf("cp-1's render after the hand-over still has inline manifests %v", names(in.InlineManifests))
	}

	ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "cilium", metav1.GetOptions{})
	testenv.Must(t, err)

	if ds.Generation != generation || ds.Annotations["meta.helm.sh/release-name"] != cilium.ReleaseName {
		t.Fatalf("DaemonSet cilium after the hand-over: generation %d (was %d), annotations %v", ds.Generation, generation, ds.Annotations)
	}

	if d, err := cilium.Deployed(ctx, cfg); err != nil || d == nil || d.Status != "deployed" || d.Revision != 1 {
		t.Fatalf("Helm's record after the hand-over: %+v, %v", d, err)
	}

	// 4. New values.
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"debug":{"enabled":true}}`)}}
	testenv.Must(t, k8s.Patch(ctx, c, patch))

	third := waitJob(t, k, "-1")
	if third.Annotations["ichor.maesh.dev/cni-request"] == second.Annotations["ichor.maesh.dev/cni-request"] {
		t.Fatal("the values change started a Job with the old request")
	}

	if cond := apimeta.FindStatusCondition(cluster(t).Status.Conditions, ichorv1alpha1.CNIHandoverCondition); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("a values change took CNIHandover back: %+v", cond)
	}

	req := requestOf(t, k, third)
	if dbg, _ := req.UserValues["debug"].(map[string]any); dbg["enabled"] != true {
		t.Fatalf("the Job's request has not the new values: %+v", req.UserValues)
	}

	upgraded := applyAsTheJob(t, k, third)
	if upgraded.Action != cilium.ActionUpgraded || upgraded.Revision != 2 {
		t.Fatalf("the values change's Helm run: %+v", upgraded)
	}

	testenv.EventuallyOK(t, waitTimeout, "status.cni.valuesHash of the new values", func() (bool, string) {
		got := cluster(t).Status.CNI.ValuesHash

		return got == upgraded.ValuesSHA256, got
	})

	if in := loadInput(t); len(in.InlineManifests) != 0 {
		t.Fatalf("cp-1's render after a values change has inline manifests %v", names(in.InlineManifests))
	}
}

func loadInput(t *testing.T) render.Input {
	t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "cp-1"}, m))

	in, err := render.LoadInput(t.Context(), k8s, m)
	testenv.Must(t, err)

	return in
}

func names(ims []render.InlineManifest) []string {
	out := make([]string, 0, len(ims))
	for _, im := range ims {
		out = append(out, im.Name)
	}

	return out
}

// waitJob waits for the ichor-cni Job whose name ends in suffix.
func waitJob(t *testing.T, k kubernetes.Interface, suffix string) *batchv1.Job {
	t.Helper()

	var job *batchv1.Job

	testenv.EventuallyOK(t, waitTimeout, "an ichor-cni Job ending in "+suffix, func() (bool, string) {
		jobs, err := k.BatchV1().Jobs("kube-system").List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ichor-cni"})
		if err != nil {
			return false, err.Error()
		}

		var seen []string

		for i := range jobs.Items {
			seen = append(seen, jobs.Items[i].Name)
			if strings.HasSuffix(jobs.Items[i].Name, suffix) && jobs.Items[i].DeletionTimestamp == nil {
				job = &jobs.Items[i]
			}
		}

		return job != nil, fmt.Sprintf("Jobs %v", seen)
	})

	if job.Spec.Template.Spec.ServiceAccountName != cilium.JobServiceAccount || !job.Spec.Template.Spec.HostNetwork ||
		!slices.Contains(job.Spec.Template.Spec.Containers[0].Args, "apply") {
		t.Fatalf("Job %s is not the ichor-cni Job: %+v", job.Name, job.Spec.Template.Spec)
	}

	return job
}

// requestOf reads the request a Job carries, from its ConfigMap.
func requestOf(t *testing.T, k kubernetes.Interface, job *batchv1.Job) cilium.Request {
	t.Helper()

	return testworld.CNIRequest(t, k, job)
}

// applyAsTheJob does what the Job's `ichor-installer cni apply` does, with
// the Job's request and the cluster's admin credentials.
func applyAsTheJob(t *testing.T, k kubernetes.Interface, job *batchv1.Job) *cilium.Applied {
	t.Helper()

	cfg, _ := adminConfig(t)

	return testworld.ApplyAsTheCNIJob(t, cfg, k, job)
}
