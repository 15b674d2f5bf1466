package cnihandover_test

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestKubeProxySwitch switches kube-proxy replaced → enabled → replaced on
// the cluster TestHandover handed over, each through a kube-proxy operation
// whose controller is killed after every reconcile (a new controller process
// each time), and asserts the order on every one of those reconciles:
//
//   - to enabled: Talos's side first (status.cni.kubeProxy, then every
//     control plane's running configuration, then Talos's kube-proxy
//     DaemonSet rolled out); Cilium's kubeProxyReplacement is never false
//     while that DaemonSet is missing or not rolled out;
//   - to replaced: Cilium first; Talos's side never moves while Cilium's
//     live config is not kubeProxyReplacement true, and Talos's kube-proxy
//     objects are deleted only after Talos's side moved, their entries in
//     Talos's manifest inventory too;
//   - a switch called off (spec put back) before its Talos step ends Failed
//     and moves nothing.
//
// kwok "completes" each Cilium Job without a Helm run: the operation pauses
// on kube-proxy-cilium with Helm's record, the release is applied as the Job
// would and the operation resumed (one Job per run).
func TestKubeProxySwitch(t *testing.T) {
	ctx := t.Context()
	cfg, k := adminConfig(t)

	testenv.EventuallyOK(t, waitTimeout, "Cilium handed over, kube-proxy replaced", func() (bool, string) {
		d, err := cilium.Deployed(ctx, cfg)
		cond := apimeta.FindStatusCondition(cluster(t).Status.Conditions, ichorv1alpha1.CNIHandoverCondition)

		return err == nil && d != nil && d.Status == "deployed" && cond != nil && cond.Status == metav1.ConditionTrue &&
			kubeProxyReplacement(t, k) == "true", fmt.Sprintf("%+v %v %+v", d, err, cond)
	})

	// What cnistatus records when it first sees the cluster.
	recordKubeProxy(t, ichorv1alpha1.KubeProxyReplaced)

	// To enabled: Talos first.
	op := switchKubeProxy(t, ichorv1alpha1.KubeProxyEnabled, "kp-enabled")
	seen := map[string]bool{}
	check := func(o *ichorv1alpha1.TalosOperation) {
		if kubeProxyReplacement(t, k) == "false" {
			if ok, why := kubeProxyRollsOut(t, k); !ok {
				t.Fatalf("at step %s Cilium stopped replacing kube-proxy while Talos's kube-proxy is not running everywhere: %s", o.Status.Step, why)
			}
		}
	}

	got := switchUntilPaused(t, k, op, seen, check)
	if got.Status.FailedStep != guard.KubeProxyStepCilium || got.Status.From != ichorv1alpha1.KubeProxyReplaced || got.Status.To != ichorv1alpha1.KubeProxyEnabled {
		t.Fatalf("to enabled: paused at %q (%s to %s): %s", got.Status.FailedStep, got.Status.From, got.Status.To, got.Status.FailureReason)
	}

	if cluster(t).Status.CNI.KubeProxy != ichorv1alpha1.KubeProxyEnabled {
		t.Fatalf("to enabled: Cilium's step ran before Talos's side moved (status.cni.kubeProxy %q)", cluster(t).Status.CNI.KubeProxy)
	}

	if ok, why := kubeProxyRollsOut(t, k); !ok {
		t.Fatalf("to enabled: Cilium's step ran before Talos's kube-proxy ran everywhere: %s", why)
	}

	resumeAfterTheJob(t, k, got)
	reconcileUntil(t, k, op, seen, func(o *ichorv1alpha1.TalosOperation) bool {
		check(o)

		return o.Status.Phase == ichorv1alpha1.OperationSucceeded
	})

	if v := kubeProxyReplacement(t, k); v != "false" {
		t.Fatalf("to enabled: cilium-config kube-proxy-replacement %q", v)
	}

	if len(seen) != 2 {
		t.Fatalf("to enabled: Jobs %v, want one per run", seen)
	}

	lockFree(t)

	// To replaced: Cilium first, Talos's objects deleted last.
	op = switchKubeProxy(t, ichorv1alpha1.KubeProxyReplaced, "kp-replaced")
	seen = map[string]bool{}
	check = func(o *ichorv1alpha1.TalosOperation) {
		moved := cluster(t).Status.CNI.KubeProxy == ichorv1alpha1.KubeProxyReplaced
		if moved && kubeProxyReplacement(t, k) != "true" {
			t.Fatalf("at step %s Talos's side moved to replaced while Cilium does not replace kube-proxy", o.Status.Step)
		}

		if !kubeProxyDaemonSetExists(t, k) && !moved {
			t.Fatalf("at step %s Talos's kube-proxy was deleted while Talos's side still renders it", o.Status.Step)
		}
	}

	got = switchUntilPaused(t, k, op, seen, check)
	if got.Status.FailedStep != guard.KubeProxyStepCilium || cluster(t).Status.CNI.KubeProxy != ichorv1alpha1.KubeProxyEnabled {
		t.Fatalf("to replaced: paused at %q with status.cni.kubeProxy %q: %s", got.Status.FailedStep, cluster(t).Status.CNI.KubeProxy, got.Status.FailureReason)
	}

	if !kubeProxyDaemonSetExists(t, k) {
		t.Fatal("to replaced: Talos's kube-proxy was deleted before Cilium replaced it")
	}

	resumeAfterTheJob(t, k, got)
	done := reconcileUntil(t, k, op, seen, func(o *ichorv1alpha1.TalosOperation) bool {
		check(o)

		return o.Status.Phase == ichorv1alpha1.OperationSucceeded
	})

	if cond := apimeta.FindStatusCondition(done.Status.Conditions, ichorv1alpha1.ReadyCondition); cond == nil || !strings.Contains(cond.Message, "kube-proxy objects are gone") {
		t.Fatalf("Ready after the switch: %+v", cond)
	}

	for _, gone := range []error{
		get(k.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})),
		get(k.CoreV1().ServiceAccounts("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})),
		get(k.RbacV1().ClusterRoleBindings().Get(ctx, "kube-proxy", metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(gone) {
			t.Fatalf("a kube-proxy object of Talos's is left after the switch: %v", gone)
		}
	}

	inv, err := k.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	testenv.Must(t, err)

	for key := range inv.Data {
		if strings.Contains(key, "kube-proxy") {
			t.Fatalf("Talos's inventory still records %s: enabling kube-proxy again would not recreate it", key)
		}
	}

	if c := cluster(t); c.Status.CNI.KubeProxy != ichorv1alpha1.KubeProxyReplaced {
		t.Fatalf("status.cni.kubeProxy %q after the switch", c.Status.CNI.KubeProxy)
	}

	lockFree(t)

	// Called off: spec put back before the Talos step ends the operation;
	// Talos's side never moved.
	op = switchKubeProxy(t, ichorv1alpha1.KubeProxyEnabled, "kp-called-off")
	reconcileUntil(t, k, op, map[string]bool{}, func(o *ichorv1alpha1.TalosOperation) bool { return o.Status.Step == guard.KubeProxyStepTalos })

	c := cluster(t)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced
	c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] = ichorv1alpha1.KubeProxyReplaced
	testenv.Must(t, k8s.Patch(ctx, c, patch))

	off := reconcileUntil(t, k, op, map[string]bool{}, func(o *ichorv1alpha1.TalosOperation) bool { return o.Status.Phase == ichorv1alpha1.OperationFailed })
	if cond := apimeta.FindStatusCondition(off.Status.Conditions, ichorv1alpha1.ReadyCondition); cond == nil || !strings.Contains(cond.Message, "called off") {
		t.Fatalf("Ready of the called-off switch: %+v", cond)
	}

	if c := cluster(t); c.Status.CNI.KubeProxy != ichorv1alpha1.KubeProxyReplaced || kubeProxyDaemonSetExists(t, k) {
		t.Fatalf("a called-off switch moved Talos's side: status.cni.kubeProxy %q, kube-proxy DaemonSet %t", c.Status.CNI.KubeProxy, kubeProxyDaemonSetExists(t, k))
	}

	lockFree(t)
}

func get[T any](_ T, err error) error { return err }

// recordKubeProxy writes status.cni.kubeProxy as cnistatus does.
func recordKubeProxy(t *testing.T, mode string) {
	t.Helper()

	c := cluster(t)
	patch := fmt.Appendf(nil, `{"status":{"cni":{"kubeProxy":%q}}}`, mode)
	testenv.Must(t, k8s.Status().Patch(t.Context(), c, client.RawPatch(types.MergePatchType, patch)))
}

// switchKubeProxy writes spec.cni.kubeProxy as `ichor cni kube-proxy`
// does and creates the operation cnistatus would start.
func switchKubeProxy(t *testing.T, mode, name string) string {
	t.Helper()

	c := cluster(t)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.CNI.KubeProxy = mode
	c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] = mode
	testenv.Must(t, k8s.Patch(t.Context(), c, patch))

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: clusterName, Type: ichorv1alpha1.OperationKubeProxy,
			KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: mode}},
	}
	testenv.Must(t, k8s.Create(t.Context(), op))

	return name
}

func switchUntilPaused(t *testing.T, k kubernetes.Interface, name string, seen map[string]bool, check func(*ichorv1alpha1.TalosOperation)) *ichorv1alpha1.TalosOperation {
	t.Helper()

	return reconcileUntil(t, k, name, seen, func(o *ichorv1alpha1.TalosOperation) bool {
		check(o)

		return o.Status.FailedStep != ""
	})
}

// resumeAfterTheJob applies the paused run's Job as the Job would, then
// resumes the operation.
func resumeAfterTheJob(t *testing.T, k kubernetes.Interface, op *ichorv1alpha1.TalosOperation) {
	t.Helper()

	for _, want := range []string{"applies kubeProxyReplacement", "did not succeed", "ichor operation resume " + op.Name} {
		if !strings.Contains(op.Status.FailureReason, want) {
			t.Fatalf("failureReason %q does not say %q", op.Status.FailureReason, want)
		}
	}

	applied := applyAsTheJob(t, k, onlyJob(t, k, op.Name))
	if applied.Action != cilium.ActionUpgraded {
		t.Fatalf("the switch's Helm run: %+v", applied)
	}

	patch := client.MergeFrom(op.DeepCopy())
	op.Annotations = map[string]string{ichorv1alpha1.ResumeAnnotation: "1"}
	testenv.Must(t, k8s.Patch(t.Context(), op, patch))
}

// kubeProxyReplacement is Cilium's live setting.
func kubeProxyReplacement(t *testing.T, k kubernetes.Interface) string {
	t.Helper()

	cm, err := k.CoreV1().ConfigMaps("kube-system").Get(t.Context(), cni.CiliumConfigMap, metav1.GetOptions{})
	testenv.Must(t, err)

	return cm.Data[cni.KubeProxyReplacementKey]
}

func kubeProxyDaemonSetExists(t *testing.T, k kubernetes.Interface) bool {
	t.Helper()

	_, err := k.AppsV1().DaemonSets("kube-system").Get(t.Context(), "kube-proxy", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	return err == nil
}

// kubeProxyRollsOut reports whether Talos's kube-proxy runs on every node.
func kubeProxyRollsOut(t *testing.T, k kubernetes.Interface) (bool, string) {
	t.Helper()

	ds, err := k.AppsV1().DaemonSets("kube-system").Get(t.Context(), "kube-proxy", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "no DaemonSet kube-system/kube-proxy"
	}

	testenv.Must(t, err)

	return rolledOut(ds)
}

func rolledOut(ds *appsv1.DaemonSet) (bool, string) {
	s := ds.Status

	return s.DesiredNumberScheduled > 0 && s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled,
		fmt.Sprintf("desired %d, updated %d, available %d", s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable)
}

func lockFree(t *testing.T) {
	t.Helper()

	testenv.EventuallyOK(t, waitTimeout, "the cluster lock free", func() (bool, string) {
		holder, err := lock.Holder(t.Context(), k8s, types.NamespacedName{Namespace: ns, Name: clusterName})
		if err != nil {
			return false, err.Error()
		}

		return holder == "", "held by " + holder
	})
}
