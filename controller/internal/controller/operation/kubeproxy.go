package operation

// The kube-proxy operation (architecture, "CNI"; issue #20 item 4): the
// switch spec.cni.kubeProxy asks for, carried out in the only order that
// never leaves Services without a proxy (guard/kubeproxy.go). The
// cnistatus controller starts it when spec.cni.kubeProxy differs from
// status.cni.kubeProxy, the mode Talos's side is rendered with.
//
//	to replaced: kube-proxy-check → kube-proxy-cilium (the ichor-cni Job
//	applies kubeProxyReplacement: true) → kube-proxy-verify (Cilium's
//	DaemonSet rolled out on every node, cilium-config says so) →
//	kube-proxy-talos (status.cni.kubeProxy moves; the machine reconciler
//	applies the render, which turns Talos's kube-proxy off; every control
//	plane's running configuration is read back) → kube-proxy-cleanup
//	(Talos's kube-proxy objects deleted, and their entries in Talos's
//	manifest inventory, since Talos has no delete path).
//	to enabled: kube-proxy-check → kube-proxy-talos (as above; then Talos's
//	kube-proxy DaemonSet rolled out on every node) → kube-proxy-cilium
//	(kubeProxyReplacement: false) → kube-proxy-verify.
//
// Every step is idempotent and recorded in status.step, so a restarted
// controller resumes where it stopped; the Cilium Job is named from the
// operation's UID and resume token (cni.go). A spec.cni.kubeProxy put back
// to what Talos runs before the Talos step calls the switch off: the
// operation ends Failed saying so, and the hand-over controller puts Cilium's
// values back. The operation never writes spec.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/cnijob"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;patch

// Talos's manifest inventory (t:internal/app/machined/pkg/controllers/k8s/manifest_apply.go,
// with go-kubernetes' ssa inventory): an object recorded there is never
// applied again, so a kube-proxy deleted without its entries would not come
// back when kube-proxy is enabled again.
const (
	talosInventory           = "talos-bootstrap-manifests-inventory"
	talosInventoryAnnotation = "config.k8s.io/owning-inventory"

	kindDaemonSet          = "DaemonSet"
	kindConfigMap          = "ConfigMap"
	kindClusterRoleBinding = "ClusterRoleBinding"
	kindServiceAccount     = "ServiceAccount"

	// releaseDeployed is the status of a Helm release record that is deployed.
	releaseDeployed = "deployed"
)

func isKubeProxy(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationKubeProxy && op.Spec.KubeProxy != nil
}

// kubeProxySwitch is one reconcile of a kube-proxy operation.
type kubeProxySwitch struct {
	r      *Reconciler
	s      *scope
	op     *ichorv1alpha1.TalosOperation
	c      *ichorv1alpha1.TalosCluster
	cfg    *rest.Config
	k      kubernetes.Interface
	target string
}

// kubeProxyPhase runs one step of a kube-proxy switch; the later phases
// leave kube-proxy operations alone.
func (r *Reconciler) kubeProxyPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if !isKubeProxy(op) || halted(op) {
		return ctrl.Result{}, nil
	}

	cfg, k, err := workload.ForCluster(ctx, r.APIReader, r.Client, r.Nodes, s.Cluster)
	if err != nil {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			"the cluster's Kubernetes API is not reachable: "+err.Error())

		return ctrl.Result{RequeueAfter: cniPoll}, nil //nolint:nilerr // an API server away is waited for, said in Ready
	}

	x := &kubeProxySwitch{r: r, s: s, op: op, c: s.Cluster, cfg: cfg, k: k, target: op.Spec.KubeProxy.Mode}

	// Called off: spec.cni.kubeProxy put back before Talos's side moved.
	// (Admission lets spec move only that way while the operation is
	// unfinished: guard.CheckKubeProxySwitch.)
	if guard.KubeProxyMode(x.c) != x.target {
		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationFailed, ichorv1alpha1.FailedReason,
			fmt.Sprintf("called off: spec.cni.kubeProxy is %s again, the mode Talos's side runs; Cilium's values follow it through the hand-over controller",
				guard.KubeProxyMode(x.c)))
	}

	switch op.Status.Step {
	case "", guard.KubeProxyStepCheck:
		op.Status.Step = guard.KubeProxyStepCheck

		return x.check(ctx)
	case guard.KubeProxyStepCilium:
		return x.cilium(ctx)
	case guard.KubeProxyStepVerify:
		return x.verify(ctx)
	case guard.KubeProxyStepTalos:
		return x.talos(ctx)
	case guard.KubeProxyStepCleanup:
		return x.cleanup(ctx)
	default:
		r.fail(op, nil, op.Status.Step, "unknown step "+op.Status.Step)

		return ctrl.Result{}, nil
	}
}

// next moves to the step after the current one, or completes the operation.
func (x *kubeProxySwitch) next(ctx context.Context, done string) (ctrl.Result, error) {
	steps := guard.KubeProxySteps(x.target)

	i := slices.Index(steps, x.op.Status.Step)
	if i < 0 || i == len(steps)-1 {
		return ctrl.Result{}, x.r.complete(ctx, x.s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
			fmt.Sprintf("kube-proxy switched from %s to %s: %s", x.op.Status.From, x.target, done))
	}

	x.op.Status.Step = steps[i+1]
	x.op.Status.ProgressSequence++
	setCond(x.op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason, done)
	x.r.Recorder.Eventf(x.op, x.c, corev1.EventTypeNormal, "KubeProxySwitchStep", "Switch", "%s; next: %s", done, x.op.Status.Step)

	return ichorreconcile.NextStep(), nil
}

func (x *kubeProxySwitch) waiting(msg string) (ctrl.Result, error) {
	setCond(x.op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason, msg)

	return ctrl.Result{RequeueAfter: cniPoll}, nil
}

// check: Cilium is Ichor's deployed release and rolled out.
func (x *kubeProxySwitch) check(ctx context.Context) (ctrl.Result, error) {
	op := x.op

	deployed, err := cilium.Deployed(ctx, x.cfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading Helm's release %s/%s: %w", cilium.Namespace, cilium.ReleaseName, err)
	}

	if deployed == nil || deployed.Status != releaseDeployed {
		x.r.fail(op, nil, guard.KubeProxyStepCheck, fmt.Sprintf("Helm's release %s/%s is not deployed (%s); the hand-over controller reports why in the TalosCluster's CNIHandover condition",
			cilium.Namespace, cilium.ReleaseName, cnijob.Describe(deployed)))

		return ctrl.Result{}, nil
	}

	if ok, why, err := workload.DaemonSetRolledOut(ctx, x.k, cilium.Namespace, "cilium"); err != nil || !ok {
		if err != nil {
			why = err.Error()
		}

		return x.waiting("waiting for Cilium's DaemonSet to be rolled out before the switch: " + why)
	}

	op.Status.From, op.Status.To = guard.RenderedKubeProxy(x.c), x.target
	setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("kube-proxy %s to %s: Helm's release is deployed (chart %s), Cilium's DaemonSet is rolled out; order: %s",
			op.Status.From, x.target, deployed.Version, strings.Join(guard.KubeProxySteps(x.target)[1:], ", ")))

	return x.next(ctx, "pre-checks passed")
}

// cilium: the ichor-cni Job applies the cluster's Cilium values, whose
// kubeProxyReplacement follows spec.cni.kubeProxy (the target), on the chart
// that runs.
func (x *kubeProxySwitch) cilium(ctx context.Context) (ctrl.Result, error) {
	u := &cniUpgrade{r: x.r, s: x.s, op: x.op, cfg: x.cfg, k: x.k, step: guard.KubeProxyStepCilium, event: "KubeProxySwitchCilium"}

	deployed, err := cilium.Deployed(ctx, x.cfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading Helm's release %s/%s: %w", cilium.Namespace, cilium.ReleaseName, err)
	}

	if deployed != nil {
		u.target = deployed.Version
	}

	u.what = fmt.Sprintf("applies kubeProxyReplacement: %t to Helm release %s (chart %s)", x.target == ichorv1alpha1.KubeProxyReplaced, cilium.ReleaseName, u.target)
	u.applied = func(ctx context.Context, deployed *cilium.ReleaseState) (ctrl.Result, error) {
		return x.next(ctx, fmt.Sprintf("Helm revision %d of release %s/%s has kubeProxyReplacement: %t",
			deployed.Revision, cilium.Namespace, cilium.ReleaseName, x.target == ichorv1alpha1.KubeProxyReplaced))
	}

	return u.apply(ctx)
}

// verify: every node runs a Cilium agent of the new revision, and Cilium's
// live config says what the target needs.
func (x *kubeProxySwitch) verify(ctx context.Context) (ctrl.Result, error) {
	if ok, why, err := workload.DaemonSetRolledOut(ctx, x.k, cilium.Namespace, "cilium"); err != nil || !ok {
		if err != nil {
			why = err.Error()
		}

		return x.waiting("waiting for Cilium's agents to run the new configuration on every node: " + why)
	}

	cm, err := x.k.CoreV1().ConfigMaps(cilium.Namespace).Get(ctx, cni.CiliumConfigMap, metav1.GetOptions{})
	if err != nil {
		return x.waiting(fmt.Sprintf("reading ConfigMap %s/%s: %v", cilium.Namespace, cni.CiliumConfigMap, err))
	}

	if msg := cni.CheckKubeProxy(x.target, cm.Data, false); msg != "" {
		return x.waiting("waiting for Cilium's live config: " + msg)
	}

	return x.next(ctx, fmt.Sprintf("Cilium's agents are rolled out on every node and ConfigMap %s/%s has %s: %s",
		cilium.Namespace, cni.CiliumConfigMap, cni.KubeProxyReplacementKey, cm.Data[cni.KubeProxyReplacementKey]))
}

// talos: status.cni.kubeProxy moves to the target, the machine reconciler
// applies the render (a change Talos applies without a reboot,
// configmeta), and every approved control plane's running configuration is
// read back; to enabled, Talos's kube-proxy must then run on every node.
func (x *kubeProxySwitch) talos(ctx context.Context) (ctrl.Result, error) {
	if x.c.Status.CNI.KubeProxy != x.target {
		patch := fmt.Appendf(nil, `{"status":{"cni":{"kubeProxy":%q}}}`, x.target)
		if err := x.r.Client.Status().Patch(ctx, x.c, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording status.cni.kubeProxy %s on TalosCluster %s: %w", x.target, x.c.Name, err)
		}

		x.r.Recorder.Eventf(x.c, x.op, corev1.EventTypeNormal, "KubeProxyRendered", "Switch",
			"Talos's side of kube-proxy is rendered %s from now on (operation %s)", x.target, x.op.Name)

		return x.waiting(fmt.Sprintf("Talos's side is rendered with kube-proxy %s; waiting for the control planes to run it", x.target))
	}

	var list ichorv1alpha1.TalosMachineList
	if err := x.r.Client.List(ctx, &list, client.InNamespace(x.c.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing TalosMachines in %s: %w", x.c.Namespace, err)
	}

	b, err := machinestate.LoadBundle(ctx, x.r.APIReader, x.c)
	if err != nil {
		return x.waiting("reading the cluster's secrets bundle: " + err.Error())
	}

	want := x.target == ichorv1alpha1.KubeProxyEnabled

	var lagging []string

	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName != x.c.Name || m.DeletionTimestamp != nil || !guard.IsApprovedControlPlane(m) {
			continue
		}

		if got, err := x.nodeRunsKubeProxy(ctx, m, b); err != nil || got != want {
			why := fmt.Sprintf("runs kube-proxy enabled: %t", got)
			if err != nil {
				why = talos.Message(err)
			}

			lagging = append(lagging, m.Name+" ("+why+")")
		}
	}

	if len(lagging) > 0 {
		return x.waiting(fmt.Sprintf("waiting for the control planes to run the configuration with kube-proxy %s: %s", x.target, strings.Join(lagging, ", ")))
	}

	if want {
		if ok, why, err := workload.DaemonSetRolledOut(ctx, x.k, "kube-system", cni.KubeProxyDaemonSet); err != nil || !ok {
			if err != nil {
				why = err.Error()
			}

			return x.waiting(fmt.Sprintf("waiting for Talos's kube-proxy (DaemonSet kube-system/%s) to run on every node: %s", cni.KubeProxyDaemonSet, why))
		}

		return x.next(ctx, "every control plane runs kube-proxy enabled and Talos's kube-proxy runs on every node")
	}

	return x.next(ctx, "every control plane runs the configuration with kube-proxy off")
}

// nodeRunsKubeProxy reads whether machine m's running configuration has
// kube-proxy enabled, over the authenticated API, from the machine it is.
func (x *kubeProxySwitch) nodeRunsKubeProxy(ctx context.Context, m *ichorv1alpha1.TalosMachine, b *secrets.Bundle) (bool, error) {
	n, err := x.r.Nodes.Dial(ctx, m.Spec.Address, b)
	if err != nil {
		return false, err
	}

	defer n.Close()

	v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(m))
	if err != nil {
		return false, err
	}

	active, _, err := v.Config(ctx)
	if err != nil {
		return false, err
	}

	cfg, err := configloader.NewFromBytes(active)
	if err != nil {
		return false, fmt.Errorf("parsing the running configuration: %w", err)
	}

	p := cfg.K8sProxyConfig()

	return p != nil && p.Enabled(), nil
}

// kubeProxyObjects are the objects Talos's bootstrap manifests create for
// kube-proxy (t:internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/kube-proxy.go),
// with their inventory keys.
var kubeProxyObjects = []struct{ kind, key string }{
	{kindDaemonSet, "kube-system_kube-proxy_apps_DaemonSet"},
	{kindConfigMap, "kube-system_kube-proxy__ConfigMap"},
	{kindClusterRoleBinding, "_kube-proxy_rbac.authorization.k8s.io_ClusterRoleBinding"},
	{kindServiceAccount, "kube-system_kube-proxy__ServiceAccount"},
}

// cleanup: Talos's kube-proxy objects (the ones its inventory owns) are
// deleted, then their inventory entries; the DaemonSet's pods are waited for.
func (x *kubeProxySwitch) cleanup(ctx context.Context) (ctrl.Result, error) {
	var foreign []string

	for _, o := range kubeProxyObjects {
		meta, err := x.getKubeProxyObject(ctx, o.kind)
		if apierrors.IsNotFound(err) {
			continue
		}

		if err != nil {
			return ctrl.Result{}, err
		}

		if meta.Annotations[talosInventoryAnnotation] != talosInventory {
			foreign = append(foreign, o.kind)

			continue
		}

		if err := x.deleteKubeProxyObject(ctx, o.kind, meta.UID); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("deleting %s kube-proxy: %w", o.kind, err)
		}
	}

	if err := x.forgetInventory(ctx); err != nil {
		return ctrl.Result{}, err
	}

	pods, err := x.k.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("listing kube-proxy's pods: %w", err)
	}

	if len(pods.Items) > 0 && len(foreign) == 0 {
		return x.waiting(fmt.Sprintf("deleted Talos's kube-proxy objects; waiting for %d kube-proxy pods to go", len(pods.Items)))
	}

	done := "Talos's kube-proxy objects are gone (DaemonSet, ConfigMap, ClusterRoleBinding, ServiceAccount and their inventory entries)"
	if len(foreign) > 0 {
		done += fmt.Sprintf("; left alone, as Talos's inventory does not own them: kube-proxy %s (KubeProxyConsistent reports a DaemonSet that still runs)",
			strings.Join(foreign, ", "))
	}

	return x.next(ctx, done)
}

func (x *kubeProxySwitch) getKubeProxyObject(ctx context.Context, kind string) (metav1.ObjectMeta, error) {
	switch kind {
	case kindDaemonSet:
		o, err := x.k.AppsV1().DaemonSets("kube-system").Get(ctx, cni.KubeProxyDaemonSet, metav1.GetOptions{})
		if err != nil {
			return metav1.ObjectMeta{}, err
		}

		return o.ObjectMeta, nil
	case kindConfigMap:
		o, err := x.k.CoreV1().ConfigMaps("kube-system").Get(ctx, kubeProxyName, metav1.GetOptions{})
		if err != nil {
			return metav1.ObjectMeta{}, err
		}

		return o.ObjectMeta, nil
	case kindClusterRoleBinding:
		o, err := x.k.RbacV1().ClusterRoleBindings().Get(ctx, kubeProxyName, metav1.GetOptions{})
		if err != nil {
			return metav1.ObjectMeta{}, err
		}

		return o.ObjectMeta, nil
	default:
		o, err := x.k.CoreV1().ServiceAccounts("kube-system").Get(ctx, kubeProxyName, metav1.GetOptions{})
		if err != nil {
			return metav1.ObjectMeta{}, err
		}

		return o.ObjectMeta, nil
	}
}

func (x *kubeProxySwitch) deleteKubeProxyObject(ctx context.Context, kind string, uid types.UID) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}

	switch kind {
	case kindDaemonSet:
		return x.k.AppsV1().DaemonSets("kube-system").Delete(ctx, cni.KubeProxyDaemonSet, opts)
	case kindConfigMap:
		return x.k.CoreV1().ConfigMaps("kube-system").Delete(ctx, kubeProxyName, opts)
	case kindClusterRoleBinding:
		return x.k.RbacV1().ClusterRoleBindings().Delete(ctx, kubeProxyName, opts)
	default:
		return x.k.CoreV1().ServiceAccounts("kube-system").Delete(ctx, kubeProxyName, opts)
	}
}

// forgetInventory removes kube-proxy's entries from Talos's manifest
// inventory, so that enabling kube-proxy again makes Talos create them.
func (x *kubeProxySwitch) forgetInventory(ctx context.Context) error {
	cm, err := x.k.CoreV1().ConfigMaps("kube-system").Get(ctx, talosInventory, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}

	if err != nil {
		return fmt.Errorf("reading ConfigMap kube-system/%s: %w", talosInventory, err)
	}

	changed := false

	for _, o := range kubeProxyObjects {
		if _, ok := cm.Data[o.key]; ok {
			delete(cm.Data, o.key)

			changed = true
		}
	}

	if !changed {
		return nil
	}

	if _, err := x.k.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("removing kube-proxy from Talos's inventory kube-system/%s: %w", talosInventory, err)
	}

	return nil
}
