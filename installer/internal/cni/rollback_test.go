package cni_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestApplyRollsBackAFailedUpgrade: a chart upgrade the cluster refuses
// half-way (an admission policy refuses the new DaemonSet, after Helm has
// created the new chart's objects) is rolled back to the revision that ran:
// Apply fails saying so, Helm's newest record is deployed with the old chart
// and values, the DaemonSet runs the old image, the objects the new chart
// added are gone, and the old chart's hubble-generate-certs Job (named from
// its spec, so the new chart has another one, and immutable) is left as it
// was, not patched. With the policy gone, the same upgrade succeeds.
func TestApplyRollsBackAFailedUpgrade(t *testing.T) {
	ctx := t.Context()
	versions := cilium.Versions()
	older, newer := versions[0], versions[len(versions)-1]

	released(t)

	from := base
	from.Version = older
	apply(t, from)
	testenv.Eventually(t, waitTimeout, "Cilium "+older+" rolled out", func() error { return rolledOut(ctx) })

	before, err := cilium.Deployed(ctx, admin)
	testenv.Must(t, err)

	oldJobs := certJobs(t)
	if len(oldJobs) != 1 {
		t.Fatalf("hubble-generate-certs Jobs at %s: %v", older, oldJobs)
	}

	// The policy: refuse Cilium's DaemonSet at the newer chart.
	fail := admissionv1.Fail
	vap := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-new-cilium"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"daemonsets"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("!(object.metadata.name == 'cilium' && object.spec.template.spec.containers.exists(c, c.image.contains(':%s')))", newer),
				Message:    "test policy: Cilium " + newer + " is refused",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-new-cilium"},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: vap.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}

	_, err = clientset.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{})
	testenv.Must(t, err)
	_, err = clientset.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
	testenv.Must(t, err)

	unbind := func() {
		_ = clientset.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = clientset.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, vap.Name, metav1.DeleteOptions{})
	}
	defer unbind()

	testenv.Eventually(t, time.Minute, "the policy in force", func() error {
		ds, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
		if err != nil {
			return err
		}

		ds.Spec.Template.Spec.Containers[0].Image = "quay.io/cilium/cilium:" + newer
		_, err = clientset.AppsV1().DaemonSets(cilium.Namespace).Update(ctx, ds, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return fmt.Errorf("a dry-run update to %s was allowed", newer)
		}

		if !strings.Contains(err.Error(), "is refused") {
			return fmt.Errorf("a dry-run update to %s: %w", newer, err)
		}

		return nil
	})

	var log bytes.Buffer

	to := base
	to.Version = newer
	_, err = cilium.Apply(ctx, admin, to, applyTimeout, &log)
	t.Logf("Apply log:\n%s", log.String())

	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("failed and was rolled back to revision %d", before.Revision)) {
		t.Fatalf("Apply of a refused upgrade: %v; want it rolled back to revision %d", err, before.Revision)
	}

	if !strings.Contains(log.String(), "hubble-generate-certs") || !strings.Contains(log.String(), "was not touched by the failed upgrade") {
		t.Errorf("the log does not say the old chart's Job was left as it was")
	}

	after, err := cilium.Deployed(ctx, admin)
	testenv.Must(t, err)

	if after.Status != release.StatusDeployed.String() || after.Version != older || after.ValuesSHA256 != before.ValuesSHA256 || after.Revision != before.Revision+2 {
		t.Fatalf("Helm's newest record after the rollback: %+v; want revision %d deployed with %s and the values of revision %d",
			after, before.Revision+2, older, before.Revision)
	}

	ds, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	testenv.Must(t, err)

	if img := ds.Spec.Template.Spec.Containers[0].Image; !strings.Contains(img, ":"+older) {
		t.Fatalf("DaemonSet cilium after the rollback runs %s", img)
	}

	if got := certJobs(t); len(got) != 1 || got[0].Name != oldJobs[0].Name || got[0].UID != oldJobs[0].UID {
		t.Fatalf("hubble-generate-certs Jobs after the rollback: %v; want %s untouched", jobNames(got), oldJobs[0].Name)
	}

	// The policy gone, the upgrade goes through; the suite's later tests
	// start from the default chart again.
	unbind()
	testenv.Eventually(t, time.Minute, "the policy gone", func() error {
		_, err := cilium.Apply(ctx, admin, to, applyTimeout, &log)

		return err
	})

	if d, err := cilium.Deployed(ctx, admin); err != nil || d.Version != newer || d.Status != release.StatusDeployed.String() {
		t.Fatalf("after the upgrade: %+v, %v", d, err)
	}
}

// certJobs are the live hubble-generate-certs Jobs.
func certJobs(t *testing.T) []batchv1.Job {
	t.Helper()

	list, err := clientset.BatchV1().Jobs(cilium.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "k8s-app=hubble-generate-certs"})
	testenv.Must(t, err)

	var out []batchv1.Job

	for _, j := range list.Items {
		if j.DeletionTimestamp == nil {
			out = append(out, j)
		}
	}

	return out
}

func jobNames(js []batchv1.Job) []string {
	out := make([]string, 0, len(js))
	for _, j := range js {
		out = append(out, j.Name)
	}

	return out
}
